import { execFile } from 'node:child_process';
import { lstatSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cardKey, type Provider } from '../../src/contracts/sample.js';
import type { LeasedCard } from '../../src/contracts/worker-protocol.js';
import { migMinorKey, parseMigMinors } from '../samplers/mig-parse.js';
import { MIG_MINORS_PATH } from '../samplers/nvidia-sampler.js';
import { simMigMinors } from '../samplers/sim-sampler.js';
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
 *
 * A MIG slice (docs/decisions/0046-mig-slices-as-cards.md; its index from 256 encodes parent, GPU and
 * compute instance) gets its parent's node, the control nodes as above, and exactly the two capability
 * nodes of its GPU instance and compute instance, `/dev/nvidia-caps/nvidia-cap<M>`, never the config or
 * monitor ones. The minors are the driver's (/proc/driver/nvidia-caps/mig-minors) on nvidia, and the
 * same numbering on stand-in nodes on a sim worker, made beside the card nodes. A slice on slice B's
 * node is then not in slice A's sandbox at all: opening it gives ENOENT.
 */

/** Key of a sim capability stand-in node in `SimNodes`: this plus its minor (card indexes stay below). */
export const SIM_CAP_KEY = 1 << 20;

/** One node to bind: the host path and the path the task sees. */
export interface DeviceNode {
  readonly host: string;
  readonly inside: string;
}

/**
 * The host nodes a sim worker made (or /dev/null), by card index, and its MIG capability stand-ins by
 * `SIM_CAP_KEY + minor`.
 */
export type SimNodes = ReadonlyMap<number, string>;

/** A slice's two capability minors on a real host, or null when the driver does not list them. */
export type MigMinorsLookup = (parent: number, gi: number, ci: number) => { gi: number; ci: number } | null;

/** Reads the driver's mig-minors once per call of `deviceNodesFor` (a few KiB). */
function driverMinors(path: string): MigMinorsLookup {
  let minors: ReturnType<typeof parseMigMinors>['minors'];
  try {
    minors = parseMigMinors(readFileSync(path, 'utf8')).minors;
  } catch (err) {
    throw new Error(`cannot read ${path} for a MIG slice's capability nodes: ${(err as Error).message}`);
  }
  // The capability names use the card's minor number, taken as its index as above.
  return (parent, gi, ci) => {
    const giMinor = minors.get(migMinorKey(parent, gi));
    const ciMinor = minors.get(migMinorKey(parent, gi, ci));
    return giMinor === undefined || ciMinor === undefined ? null : { gi: giMinor, ci: ciMinor };
  };
}

/**
 * The nodes for `cards` on a `provider` host. Throws when a node the task needs is missing on the host,
 * with the node's name, so the plan is rejected (SETUP_FAILED) rather than run without its card.
 */
export function deviceNodesFor(
  provider: Provider,
  cards: readonly LeasedCard[],
  opts: { simNodes?: SimNodes; devDir?: string; migMinorsPath?: string } = {},
): DeviceNode[] {
  const dev = opts.devDir ?? '/dev';
  const nodes: DeviceNode[] = [];
  const need = (name: string, inside = `/dev/${name}`) => {
    const host = join(dev, name);
    if (!isCharDevice(host)) throw new Error(`device node ${host} is missing on this host`);
    if (!nodes.some((n) => n.inside === inside)) nodes.push({ host, inside });
  };
  const slices = cards.some((card) => cardKey(card.index)?.kind === 'mig');
  if (slices && provider !== 'sim' && provider !== 'nvidia')
    throw new Error('MIG slices exist only on nvidia cards');
  let minorsOf: MigMinorsLookup | null = null;
  /** The card node a card or slice needs (its parent's for a slice), and a slice's two capability minors. */
  const resolve = (card: LeasedCard): { node: number; caps: { gi: number; ci: number } | null } => {
    const key = cardKey(card.index);
    if (key === null) throw new Error(`card index ${card.index} is no card or MIG slice`);
    if (key.kind === 'card') return { node: key.index, caps: null };
    if (provider === 'sim') return { node: key.parent, caps: simMigMinors(key.parent, key.gi, key.ci) };
    minorsOf ??= driverMinors(opts.migMinorsPath ?? MIG_MINORS_PATH);
    const caps = minorsOf(key.parent, key.gi, key.ci);
    if (caps === null)
      throw new Error(
        `the driver lists no capability minors for MIG slice ${key.parent}:mig:${key.gi}/${key.ci}`,
      );
    return { node: key.parent, caps };
  };
  const capInside = (minor: number) => `/dev/nvidia-caps/nvidia-cap${minor}`;
  const optional = (name: string) => {
    const host = join(dev, name);
    if (isCharDevice(host)) nodes.push({ host, inside: `/dev/${name}` });
  };
  if (provider === 'sim') {
    const stand = (key: number, inside: string, what: string) => {
      const host = opts.simNodes?.get(key);
      if (host === undefined) throw new Error(`no simulated device node for ${what}`);
      if (!nodes.some((n) => n.inside === inside)) nodes.push({ host, inside });
    };
    for (const card of cards) {
      const { node, caps } = resolve(card);
      stand(node, `/dev/nvidia${node}`, `card ${node}`);
      if (caps === null) continue;
      stand(SIM_CAP_KEY + caps.gi, capInside(caps.gi), `capability ${caps.gi}`);
      stand(SIM_CAP_KEY + caps.ci, capInside(caps.ci), `capability ${caps.ci}`);
    }
    return nodes;
  }
  if (provider === 'nvidia') {
    const caps: number[] = [];
    for (const card of cards) {
      const resolved = resolve(card);
      need(`nvidia${resolved.node}`);
      if (resolved.caps !== null) caps.push(resolved.caps.gi, resolved.caps.ci);
    }
    for (const minor of caps) need(`nvidia-caps/nvidia-cap${minor}`, capInside(minor));
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
 * Makes `<dir>/nvidia<i>` for i in 0..count-1, and `<dir>/nvidia-caps/nvidia-cap<M>` for each of the
 * simulated MIG slices' capability minors, as character devices 1:3 (like /dev/null), mode 0666.
 * Returns the nodes by index (capabilities by `SIM_CAP_KEY + minor`). Where mknod is not permitted (the
 * worker is not root) every node maps to /dev/null, which the sandbox binds under its name all the same.
 */
export async function makeSimDeviceNodes(
  dir: string,
  count: number,
  root: boolean,
  capabilityMinors: readonly number[] = [],
): Promise<Map<number, string>> {
  const nodes = new Map<number, string>();
  const wanted: Array<[number, string]> = [
    ...Array.from({ length: count }, (_, i): [number, string] => [i, `nvidia${i}`]),
    ...capabilityMinors.map((m): [number, string] => [SIM_CAP_KEY + m, `nvidia-caps/nvidia-cap${m}`]),
  ];
  if (!root) {
    for (const [key] of wanted) nodes.set(key, '/dev/null');
    return nodes;
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (capabilityMinors.length > 0) mkdirSync(join(dir, 'nvidia-caps'), { recursive: true, mode: 0o700 });
  for (const [key, name] of wanted) {
    const path = join(dir, name);
    if (!isCharDevice(path)) {
      await run('mknod', ['-m', '0666', path, 'c', '1', '3']);
    }
    nodes.set(key, path);
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
