import { type ChildProcess, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { liveNamespaceMembers, namespaceInitGone } from '../../../../worker/local/process-group.js';
import { probeBwrap } from '../../../../worker/sandbox/bwrap.js';
import { pidsWithMarker } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { waitFor } from '../../../support/wait.js';

// The cleanup receipt's shortcut (docs/performance.md "Noisy neighbours"): a sandbox's PID namespace counts as empty without a /proc
// walk only once its init has finished exiting. A task that escapes its process group (setsid) and
// keeps running must still be found while the init lives.

const probe = await probeBwrap({ root: isRoot });
const sandboxed = requireOrSkip('bubblewrap', probe.ok && probe.bwrap !== null, probe.detail);

let child: ChildProcess | undefined;
afterEach(() => {
  if (child?.pid !== undefined && child.exitCode === null) process.kill(-child.pid, 'SIGKILL');
});

/** A bare bwrap with its own PID namespace running `script`; its init's host pid and namespace inode. */
async function sandbox(script: string): Promise<{ init: number; ns: number; exit: Promise<void> }> {
  child = spawn(
    probe.bwrap!,
    [
      '--unshare-pid',
      ...(isRoot ? [] : ['--unshare-user']),
      '--ro-bind',
      '/',
      '/',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--json-status-fd',
      '3',
      '/bin/sh',
      '-c',
      script,
    ],
    { stdio: ['ignore', 'ignore', 'inherit', 'pipe'], detached: true },
  );
  const exit = new Promise<void>((r) => child!.once('exit', () => r()));
  let text = '';
  (child.stdio[3] as Readable).on('data', (d: Buffer) => {
    text += d.toString();
  });
  const ids = await waitFor(
    () => {
      const init = /"child-pid":\s*(\d+)/.exec(text);
      const ns = /"pid-namespace":\s*(\d+)/.exec(text);
      return init && ns ? { init: Number(init[1]), ns: Number(ns[1]) } : null;
    },
    { what: "bwrap's status" },
  );
  return { ...ids, exit };
}

describe.runIf(sandboxed)('namespaceInitGone', () => {
  it('is false while the init lives, even with the task escaped by setsid; true once it exited', async () => {
    const marker = `gpu-broker-ns-gone-${process.pid}`;
    // The setsid'd shell carries the marker on its command line; the first shell execs away from it.
    const box = await sandbox(`(setsid sh -c 'sleep 1000; echo ${marker}' &); exec sleep 1000`);
    await waitFor(() => pidsWithMarker(marker).length > 0, { what: 'the setsid child' });
    expect(await namespaceInitGone(box.init, box.ns)).toBe(false);
    expect((await liveNamespaceMembers(box.ns)).length).toBeGreaterThan(0);
    process.kill(box.init, 'SIGKILL');
    await box.exit;
    expect(await namespaceInitGone(box.init, box.ns)).toBe(true);
    // What the shortcut assumes, checked against the full walk: the kernel emptied the namespace.
    expect(await liveNamespaceMembers(box.ns)).toEqual([]);
    expect(pidsWithMarker(marker)).toEqual([]);
  });

  it('a pid that now names a process of another namespace (reused) reads as gone; so does no pid', async () => {
    // This process is not in any sandbox's namespace.
    expect(await namespaceInitGone(process.pid, 1)).toBe(true);
    expect(await namespaceInitGone(2 ** 22 + 12345, 1)).toBe(true);
  });
});
