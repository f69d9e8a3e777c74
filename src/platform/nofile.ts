import { execFileSync } from 'node:child_process';
import { findOnPath } from './find-on-path.js';

/**
 * Raising the soft RLIMIT_NOFILE of a running process to its hard limit (docs/performance.md "Noisy neighbours"). Node has no
 * setrlimit; util-linux `prlimit --pid` changes another (or this) process's limits through prlimit(2).
 * Every connection costs the master a descriptor, so the usual soft limit of 1024 is what a thousand
 * idle sockets exhausted; the hard limit is what the operator allowed.
 */

/** What happened, for the start log. */
export type NofileOutcome =
  | { raised: true; from: number; to: number }
  | { raised: false; soft: number | null; hard: number | null; reason: string };

const SEARCH_PATH = '/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin';

/** Reads `pid`'s soft and hard RLIMIT_NOFILE with prlimit. */
function readNofile(prlimit: string, pid: number): { soft: number; hard: number } {
  const out = execFileSync(
    prlimit,
    ['--pid', String(pid), '--nofile', '--raw', '--noheadings', '-o', 'SOFT,HARD'],
    {
      encoding: 'utf8',
      timeout: 5000,
    },
  );
  const [soft, hard] = out.trim().split(/\s+/);
  const num = (v: string | undefined) => (v === 'unlimited' ? Number.POSITIVE_INFINITY : Number(v));
  return { soft: num(soft), hard: num(hard) };
}

/** Sets `pid`'s soft RLIMIT_NOFILE to its hard limit; never throws. */
export function raiseNofile(pid: number): NofileOutcome {
  const prlimit = findOnPath('prlimit', SEARCH_PATH);
  if (!prlimit) return { raised: false, soft: null, hard: null, reason: 'prlimit (util-linux) not found' };
  try {
    const before = readNofile(prlimit, pid);
    if (before.soft >= before.hard)
      return { raised: false, soft: before.soft, hard: before.hard, reason: 'already at the hard limit' };
    const hard = Number.isFinite(before.hard) ? String(before.hard) : 'unlimited';
    execFileSync(prlimit, ['--pid', String(pid), `--nofile=${hard}:${hard}`], { timeout: 5000 });
    const after = readNofile(prlimit, pid);
    return { raised: true, from: before.soft, to: after.soft };
  } catch (err) {
    return {
      raised: false,
      soft: null,
      hard: null,
      reason: (err as Error).message.split('\n')[0] ?? 'failed',
    };
  }
}
