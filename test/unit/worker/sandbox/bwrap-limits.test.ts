import { describe, expect, it } from 'vitest';
import { type BwrapRequest, bwrapArgs } from '../../../../worker/sandbox/bwrap.js';
import { describeEnforced, diskUse } from '../../../../worker/sandbox/limits.js';

// The sandbox's /tmp and /dev/shm sizes from the task's limits (bwrap `--size`), and the
// enforced-limits line the worker reports.

const request: BwrapRequest = {
  system: { dirs: ['/usr'], links: [] },
  taskDir: '/data/executions/e1/task',
  hidden: [],
  pinned: [],
  devices: [],
  network: 'none',
  identity: null,
  statusFd: 3,
  argv: ['/bin/true'],
};

/** The options between the previous --tmpfs (or the start) and `--tmpfs path`. */
function tmpfsOptions(args: string[], path: string): string[] {
  const at = args.findIndex((a, i) => a === '--tmpfs' && args[i + 1] === path);
  const start = args.lastIndexOf('--tmpfs', at - 1);
  return args.slice(Math.max(args.indexOf('--dev') + 2, start + 2), at);
}

describe('bwrapArgs and the task limits', () => {
  it('sizes the private /tmp and /dev/shm, each 1777', () => {
    const args = bwrapArgs({ ...request, tmpfsBytes: { tmp: 8 * 2 ** 20, shm: 4 * 2 ** 20 } });
    expect(tmpfsOptions(args, '/dev/shm')).toEqual(['--perms', '1777', '--size', String(4 * 2 ** 20)]);
    expect(tmpfsOptions(args, '/tmp')).toEqual(['--perms', '1777', '--size', String(8 * 2 ** 20)]);
  });

  it('leaves them at the kernel default without limits (an older master)', () => {
    const args = bwrapArgs(request);
    expect(args).not.toContain('--size');
  });
});

describe('describeEnforced', () => {
  it('names each limit with its mechanism, or why it was not enforced', () => {
    expect(
      describeEnforced({
        memory_mib: { value: 512, by: 'cgroup v1 (memory, pids, cpu)' },
        pids: { value: null, by: 'not enforced: no writable cgroup hierarchy on this worker' },
        tmp_mib: { value: 8, by: 'tmpfs size' },
      }),
    ).toBe(
      'limits enforced: memory_mib 512 MiB (cgroup v1 (memory, pids, cpu)), pids not enforced: no writable cgroup hierarchy on this worker, tmp_mib 8 MiB (tmpfs size)',
    );
  });
});

describe('diskUse', () => {
  it('is zero for a missing dir and stops counting past the entry cap', async () => {
    expect(await diskUse('/nonexistent-gpu-broker', 10)).toEqual({ bytes: 0, truncated: false });
    expect((await diskUse('/usr/bin', 3)).truncated).toBe(true);
  });
});
