import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type BwrapRequest, bwrapArgs } from '../../../../worker/sandbox/bwrap.js';
import { describeEnforced } from '../../../../worker/sandbox/limits.js';
import { diskUse, removeTaskDir } from '../../../../worker/sandbox/task-dir.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';

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

/**
 * What a task can make in its dir with relative calls only: `levels` directories nested one in the
 * next, then `bytes` of data at the bottom; the host path of that bottom is past PATH_MAX (4096), so no
 * call can name it by path.
 */
function nestPastPathMax(dir: string, levels = 400, bytes = 4 * 2 ** 20): void {
  execFileSync('/bin/sh', [
    '-c',
    `cd -P "$1" && i=0; while [ $i -lt ${levels} ]; do mkdir dddddddddd && cd -P dddddddddd || exit 3; i=$((i+1)); done; head -c ${bytes} /dev/zero > big`,
    'nest',
    dir,
  ]);
}

describe('a task dir nested past PATH_MAX (attack)', () => {
  it('diskUse does not pass over it silently: it says what it could not measure', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-deep-'));
    try {
      nestPastPathMax(dir);
      const used = await diskUse(dir, 200_000);
      expect(used.unmeasured).toMatch(/ENAMETOOLONG/);
    } finally {
      await removeTaskDir(dir);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('removeTaskDir removes all of it, the data at the bottom included', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-deep-'));
    nestPastPathMax(dir);
    await removeTaskDir(dir);
    expect(existsSync(dir)).toBe(false);
  });
});

describe.runIf(requireOrSkip('root', isRoot, 'the check takes uid 65534 and chowns the tree'))(
  "a task of the worker's own uid (a worker that is not root) that makes a dir unreadable (attack)",
  () => {
    it('diskUse says it cannot measure it, and removeTaskDir still removes it all', async () => {
      // The worker that is not root runs its tasks as its own uid (bwrap in a user namespace): a task can
      // chmod 000 a dir of its data, which that uid can then neither walk nor empty. Played here by
      // uid 65534 making the tree and this process taking that uid as its effective one.
      const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-unreadable-'));
      execFileSync('/bin/chown', ['65534:65534', dir]);
      execFileSync('/usr/bin/setpriv', [
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        '/bin/sh',
        '-c',
        'mkdir "$1/hide" "$1/ro" && head -c 4194304 /dev/zero > "$1/hide/big" && touch "$1/ro/f" && chmod 000 "$1/hide" && chmod 500 "$1/ro"',
        'unreadable',
        dir,
      ]);
      let used: Awaited<ReturnType<typeof diskUse>>;
      process.setegid!(65534);
      process.seteuid!(65534);
      try {
        used = await diskUse(dir, 200_000);
        await removeTaskDir(dir);
      } finally {
        process.seteuid!(0);
        process.setegid!(0);
      }
      expect(used.unmeasured).toMatch(/EACCES/);
      expect(existsSync(dir)).toBe(false);
      rmSync(dir, { recursive: true, force: true });
    });
  },
);
