import { spawn } from 'node:child_process';

/**
 * One Slurm suite at a time on this machine, while the other suites run beside it (vitest.config.ts).
 *
 * The Slurm suites share one machine-wide Slurm (8 fake GPUs) and the two-node cluster: two of them at
 * once would see each other's jobs as foreign use and race for the GPUs. They used to run one file at a
 * time after everything else (a vitest group of their own, about a minute of a 2-core run in which the
 * other worker idled); now each takes this lock before its file is imported (test/support/slurm-setup.ts,
 * the slurm project's setup file) and gives it back after the file's last hook, so they run in the same
 * group as the rest and only ever wait for each other. test/support/spread-sequencer.ts spaces them out
 * in the queue so that one rarely waits.
 *
 * The lock is the kernel's (flock(1) on a file, held by a child that lives until its stdin closes): a
 * test fork that dies closes that pipe, the child exits and the kernel drops the lock, so no stale lock
 * outlives a crash.
 */

/** The lock file (machine-wide: a developer's run in another checkout waits too). */
export const SLURM_SUITE_LOCK = '/tmp/gpu-broker-slurm-suite.lock';

/** Options of {@link takeSlurmSuiteLock}, for its tests. */
export interface SlurmSuiteLockOptions {
  lock?: string;
  /** How long to wait for the holder, default 30 minutes (the longest Slurm suite takes about one). */
  timeoutS?: number;
}

/** Waits until this process holds the lock; returns its release (idempotent). */
export async function takeSlurmSuiteLock(opts: SlurmSuiteLockOptions = {}): Promise<() => void> {
  const lock = opts.lock ?? SLURM_SUITE_LOCK;
  const timeoutS = opts.timeoutS ?? 1800;
  const child = spawn(
    'flock',
    ['--exclusive', '--wait', String(timeoutS), lock, 'sh', '-c', 'echo held; exec cat >/dev/null'],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      if (out.includes('held\n')) resolve();
    });
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      reject(new Error(`flock ${lock} ended (${signal ?? code}) before holding it: ${stderr.trim()}`)),
    );
  });
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    child.stdin.end();
  };
}
