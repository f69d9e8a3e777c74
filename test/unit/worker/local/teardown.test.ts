import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../../../src/platform/clock.js';
import type { TaskBox } from '../../../../worker/local/box.js';
import { nameMembers } from '../../../../worker/local/process-group.js';
import { awaitCleanup, pollDelayMs, terminateLeftovers } from '../../../../worker/local/teardown.js';

// The teardown polls start short (docs/performance.md "Noisy neighbours"): a sandbox's init is often still exiting for a few ms after
// bwrap reported the task's exit, and a first wait of the full interval held the card for nothing.

/** A box whose processes are live for the first `liveFor` looks. */
function fakeBox(liveFor: number): TaskBox & { looks: number; terminated: number } {
  const box = {
    kind: 'bwrap' as const,
    spawn: { command: '/bin/true', args: [], env: {} },
    looks: 0,
    terminated: 0,
    attach: () => undefined,
    terminate: () => {
      box.terminated++;
    },
    kill: () => undefined,
    live: async () => (box.looks++ < liveFor ? [{ pid: 1, name: 'bwrap' }] : []),
    exitOf: (code: number | null, signal: NodeJS.Signals | null) => ({ code, signal }),
    dispose: async () => undefined,
  };
  return box;
}

describe('teardown polls', () => {
  it('wait 2, 4, 8 … ms, never more than the cap', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 10].map((n) => pollDelayMs(n, 50))).toEqual([2, 4, 8, 16, 32, 50, 50, 50]);
    expect(pollDelayMs(0, 1)).toBe(1);
  });

  it('the receipt comes as soon as the box empties, not a full poll interval later', async () => {
    const box = fakeBox(2);
    // The waits between looks, as asked of the timers (how long they took: `npm run bench`, test-bounds).
    const timer = vi.spyOn(globalThis, 'setTimeout');
    let waits: unknown[];
    try {
      const r = await awaitCleanup(box, { pollMs: 10_000, timeoutSeconds: 60, clock: systemClock });
      waits = timer.mock.calls.map((c) => c[1]);
      expect(r.cleaned).toBe(true);
    } finally {
      timer.mockRestore();
    }
    expect(box.looks).toBe(3);
    // 2 + 4 ms of waits, never the 10 s interval
    expect(waits).toEqual([2, 4]);
  });

  it('leftovers that go at once after SIGTERM end the grace early; a box still live at the end is not cleaned', async () => {
    const box = fakeBox(2);
    await terminateLeftovers(box, 60_000, systemClock);
    expect(box.terminated).toBe(1);
    expect(box.looks).toBe(3);
    const stuck = fakeBox(Number.POSITIVE_INFINITY);
    const r = await awaitCleanup(stuck, { pollMs: 20, timeoutSeconds: 0.1, clock: systemClock });
    expect(r).toMatchObject({ cleaned: false });
    expect(r.cleanup_detail).toMatch(/still has live processes: 1 \(bwrap\)/);
  });

  it('a leftover known only by its pid (a cgroup member) is reported by its command name', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      const pid = child.pid!;
      const box = { ...fakeBox(0), live: async () => [{ pid, name: '?' }] };
      const r = await awaitCleanup(box, { pollMs: 20, timeoutSeconds: 0.05, clock: systemClock });
      expect(r.cleanup_detail).toContain(`still has live processes: ${pid} (sleep)`);
    } finally {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
    // No such process (pids stay below pid_max), or a name already read: unchanged.
    const none = Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8'));
    expect(
      await nameMembers([
        { pid: none, name: '?' },
        { pid: 1, name: 'init-x' },
      ]),
    ).toEqual([
      { pid: none, name: '?' },
      { pid: 1, name: 'init-x' },
    ]);
  });
});
