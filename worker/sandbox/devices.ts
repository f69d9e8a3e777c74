import { execFile } from 'node:child_process';
import { lstatSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Provider } from '../../src/contracts/sample.js';
import type { LeasedCard } from '../../src/contracts/worker-protocol.js';
import { findHelper, HELPER_ENV, HELPER_PATH } from './helper-commands.js';

/**
 * Which device nodes a task's sandbox gets: the leased cards' nodes and the vendor's control nodes,
 * nothing else (docs/security.md "The task sandbox").
 *
 *   nvidia  /dev/nvidia<index> per leased card, /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools
 *           (and /dev/nvidia-modeset where present). The card index is the nvidia-smi index, whose minor
 *           number is the same on every driver we know of; a host where it differs shows up in
 *           scripts/device-check.sh as a device count that does not match.
 *   hy      /dev/kfd, and /dev/dri/renderD<128 + index> per leased card (ROCm/DTK numbering).
 *   sim     a character device per card that the worker makes under its data dir (`mknod`, the
 *           major/minor of /dev/null), bound as /dev/nvidia<index>, so isolation is testable without a
 *           GPU: a 2-card task on an 8-card sim worker sees exactly 2 nodes. A worker that is not root
 *           cannot mknod and binds /dev/null itself instead.
 */

/** One node to bind: the host path and the path the task sees. */
export interface DeviceNode {
  readonly host: string;
  readonly inside: string;
}

/** The host nodes a sim worker made (or /dev/null), by card index. */
export type SimNodes = ReadonlyMap<number, string>;

/**
 * The nodes for `cards` on a `provider` host. Throws when a node the task needs is missing on the host,
 * with the node's name, so the plan is rejected (SETUP_FAILED) rather than run without its card.
 */
export function deviceNodesFor(
  provider: Provider,
  cards: readonly LeasedCard[],
  opts: { simNodes?: SimNodes; devDir?: string } = {},
): DeviceNode[] {
  const dev = opts.devDir ?? '/dev';
  const nodes: DeviceNode[] = [];
  const need = (name: string, inside = `/dev/${name}`) => {
    const host = join(dev, name);
    if (!isCharDevice(host)) throw new Error(`device node ${host} is missing on this host`);
    nodes.push({ host, inside });
  };
  const optional = (name: string) => {
    const host = join(dev, name);
    if (isCharDevice(host)) nodes.push({ host, inside: `/dev/${name}` });
  };
  if (provider === 'sim') {
    for (const card of cards) {
      const host = opts.simNodes?.get(card.index);
      if (host === undefined) throw new Error(`no simulated device node for card ${card.index}`);
      nodes.push({ host, inside: `/dev/nvidia${card.index}` });
    }
    return nodes;
  }
  if (provider === 'nvidia') {
    for (const card of cards) need(`nvidia${card.index}`);
    need('nvidiactl');
    optional('nvidia-uvm');
    optional('nvidia-uvm-tools');
    optional('nvidia-modeset');
    return nodes;
  }
  need('kfd');
  for (const card of cards) need(`dri/renderD${128 + card.index}`);
  return nodes;
}

/**
 * Makes `<dir>/nvidia<i>` for i in 0..count-1 as character devices 1:3 (like /dev/null), mode 0666.
 * Returns the nodes by index. Where mknod is not permitted (the worker is not root) every card maps to
 * /dev/null, which the sandbox binds under the card's name all the same.
 */
export async function makeSimDeviceNodes(
  dir: string,
  count: number,
  root: boolean,
): Promise<Map<number, string>> {
  const nodes = new Map<number, string>();
  if (!root) {
    for (let i = 0; i < count; i++) nodes.set(i, '/dev/null');
    return nodes;
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (let i = 0; i < count; i++) {
    const path = join(dir, `nvidia${i}`);
    if (!isCharDevice(path)) {
      await run('mknod', ['-m', '0666', path, 'c', '1', '3']);
    }
    nodes.set(i, path);
  }
  return nodes;
}

function isCharDevice(path: string): boolean {
  try {
    return lstatSync(path).isCharacterDevice();
  } catch {
    return false;
  }
}

function run(name: string, args: string[]): Promise<void> {
  // Found on the fixed HELPER_PATH and run with HELPER_ENV, like every program the worker runs as root.
  const command = findHelper(name);
  if (command === null) return Promise.reject(new Error(`${name} is not installed in ${HELPER_PATH}`));
  return new Promise((resolve, reject) => {
    execFile(command, args, { env: { ...HELPER_ENV }, timeout: 10_000 }, (err, _out, stderr) => {
      if (err === null) resolve();
      else reject(new Error(`${command} ${args.join(' ')}: ${String(stderr).trim() || err.message}`));
    });
  });
}
