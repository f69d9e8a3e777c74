import type { FailureReason } from '../../src/contracts/worker-protocol.js';

/**
 * How a local execution's end becomes its failure reason (step 5 of executor.ts); the Slurm executor's
 * counterpart is slurmVerdict (slurm/job-outcome.ts).
 */

/** What decides a local execution's failure reason. */
export interface LocalOutcome {
  /**
   * Set when the executor itself killed the task (cancel, or the spec's time limit), or killed it
   * because its exit status was lost with the spawner that started it (WORKER_LOST, spawner.ts).
   */
  readonly killReason: 'TIMED_OUT' | 'CANCELLED' | 'PREEMPTED' | 'WORKER_LOST' | null;
  /** The main process's exit code, as its box reports it; null when a signal ended it. */
  readonly exitCode: number | null;
  /** The signal that ended the main process; null when it exited. */
  readonly signal: string | null;
  /** The cgroup's OOM kill count rose while the task ran (looked at only when SIGKILL ended it). */
  readonly oomKilled: boolean;
  /** The task limit (sandbox/limits.ts) the task broke: its cgroup's OOM kill, or the disk watch. */
  readonly breach: 'OUT_OF_MEMORY' | 'DISK_LIMIT' | null;
  /** A required output was not found. */
  readonly requiredMissing: boolean;
}

/**
 * The failure reason, null on success: the executor's own kill first, then a broken task limit (when
 * the task failed: a task that survives its child's OOM kill and exits 0 succeeded), the signal, the
 * code, the outputs. Pure.
 */
export function localVerdict(o: LocalOutcome): FailureReason | null {
  if (o.killReason !== null) return o.killReason;
  if (o.breach !== null && (o.signal !== null || o.exitCode !== 0)) return o.breach;
  if (o.signal !== null) return o.oomKilled ? 'OOM_KILLED' : 'KILLED_BY_SIGNAL';
  if (o.exitCode !== 0) return 'EXIT_NONZERO';
  return o.requiredMissing ? 'OUTPUT_MISSING' : null;
}

/**
 * The limits' detail of a run, after which a backfilled run its deadline stopped (`stoppedWithin`, the
 * plan's `stop_within_seconds`; undefined: its own time limit or nothing stopped it) says so: it had time
 * left of its limit (ADR 0049 §5).
 */
export function deadlineDetail(
  stoppedWithin: number | undefined,
  detail: { limits_detail?: readonly string[] },
): { limits_detail?: readonly string[] } {
  if (stoppedWithin === undefined) return detail;
  const why = `backfilled: stopped at its deadline of ${stoppedWithin} s from when the worker began it (its time limit plus the start-up allowance), before its own time limit`;
  return { limits_detail: [why, ...(detail.limits_detail ?? [])] };
}
