import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readlinkSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { bwrapBox } from '../../../../worker/local/box.js';
import { liveNamespaceMembers, processStartTime } from '../../../../worker/local/process-group.js';

// A late SIGKILL (the disk watch, a kill timer, a spawner's death noticed late) comes after the task's
// processes may have been reaped: the box signals a pid only while it still names the same process
// (pid + start time), never whoever was given that pid since.

afterEach(() => {
  vi.restoreAllMocks();
});

async function reaped(): Promise<number> {
  const child = spawn('/bin/true', { stdio: 'ignore', detached: true });
  await once(child, 'exit');
  return child.pid!;
}

describe('processStartTime', () => {
  it('reads a live process’s start time, the same on every read; null for a pid that is gone', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      const t = processStartTime(child.pid!);
      expect(t).toMatch(/^\d+$/);
      expect(processStartTime(child.pid!)).toBe(t);
      expect(Number(t)).toBeGreaterThanOrEqual(Number(processStartTime(process.pid)));
    } finally {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
    expect(processStartTime(await reaped())).toBeNull();
  });
});

describe('bwrapBox.kill after the task is gone', () => {
  it('signals neither the sandbox init nor bwrap’s group by a pid that no longer names them', async () => {
    // Stand-ins for bwrap (the group leader) and the sandbox init, both alive when the box learns them.
    const leader = spawn('sleep', ['30'], { stdio: 'ignore', detached: true });
    const init = spawn('sleep', ['30'], { stdio: 'ignore', detached: true });
    const box = bwrapBox({ command: '/bin/false', args: [], env: {} });
    const status = new PassThrough();
    box.attach({ pid: leader.pid!, stdio: [null, null, null, status] } as never);
    // A namespace inode no process has (never the host's: terminate would walk it).
    status.write(`{"child-pid": ${init.pid}, "pid-namespace": 1}\n`);
    await new Promise((r) => setImmediate(r));
    // Alive: the kill reaches both.
    const kills = vi.spyOn(process, 'kill');
    box.kill();
    expect(kills.mock.calls.map((c) => c[0])).toEqual(expect.arrayContaining([init.pid, -leader.pid!]));
    await Promise.all([once(leader, 'exit'), once(init, 'exit')]);
    // Gone and reaped: a late kill sends nothing by pid.
    kills.mockClear();
    box.kill();
    expect(kills).not.toHaveBeenCalled();
  });
});

describe('a sandbox namespace that is the worker’s own', () => {
  it('is never walked: terminate signals nobody (found the hard way: every host process got SIGTERM)', async () => {
    // Whatever reports it (a bug, a future bwrap), the worker's own PID namespace is never a task's.
    const own = Number(/\d+/.exec(readlinkSync('/proc/self/ns/pid'))![0]);
    expect(await liveNamespaceMembers(own)).toEqual([]);
    const leader = spawn('sleep', ['30'], { stdio: 'ignore', detached: true });
    const box = bwrapBox({ command: '/bin/false', args: [], env: {} });
    const status = new PassThrough();
    box.attach({ pid: leader.pid!, stdio: [null, null, null, status] } as never);
    status.write(`{"child-pid": ${leader.pid}, "pid-namespace": ${own}}\n`);
    await new Promise((r) => setImmediate(r));
    // No real signal can leave this test, whatever the code under test does.
    const kills = vi.spyOn(process, 'kill').mockImplementation(() => true);
    try {
      box.terminate();
      await new Promise((r) => setTimeout(r, 200));
      expect(kills.mock.calls.filter(([pid]) => pid !== leader.pid)).toEqual([]);
    } finally {
      kills.mockRestore();
      leader.kill('SIGKILL');
      await once(leader, 'exit');
    }
  });
});
