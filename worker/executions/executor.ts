import type { ExecutionPlan, FailureReason, SlurmJobReport } from '../../src/contracts/worker-protocol.js';
import type { ProcessIdentity } from '../store/executions-repo.js';
import type { LogChunkHandler } from '../task-io/logs.js';
import type { CollectedOutput } from '../task-io/outputs.js';

/**
 * The Executor port: what the execution manager (manager.ts) sees of an executor, whichever runs the
 * task: the local one (local/executor.ts, a process group on this host) or the Slurm one
 * (slurm/executor.ts, a batch job). The daemon binds one of them at start (daemon/executors.ts); both
 * return the same handle, so phases, logs, outputs and the cleanup receipt are reported one way.
 */

/** Runs plans; bound once at worker start to the local or the Slurm executor with the worker's settings. */
export interface Executor {
  /** Starts `plan`; returns at once. */
  start(plan: ExecutionPlan, hooks: ExecutionHooks): ExecutionHandle;
  /**
   * Present when the task outlives the worker (a Slurm job): takes up again, from where the backend has
   * it, the run of `plan` a previous worker process started and knew by `ref`; returns at once, with the
   * same handle and hooks as `start`.
   */
  resume?(plan: ExecutionPlan, ref: BackendRef, hooks: ExecutionHooks): ExecutionHandle;
  /**
   * Present when the started pid is a process group on this host (the local executor): who its leader
   * is for good (start time and boot), recorded with the pgid so that a restarted worker's recovery
   * never takes another group for it (local/recovery.ts). Null when the process is already gone.
   */
  identify?(pid: number): ProcessIdentity | null;
}

/**
 * What the backend knows a run by, when the run outlives the worker process: a Slurm job's report (id,
 * state, pending reason, binding). The executor binding records it with the execution; recovery hands
 * it back to `Executor.resume`.
 */
export type BackendRef = SlurmJobReport;

/** What the manager hands the executor with each plan. */
export interface ExecutionHooks {
  /** Receives stdout/stderr chunks; see task-io/logs.ts for the offset and encoding rules. */
  readonly onLog: LogChunkHandler;
  /** Log bytes (both streams together) to keep for this run: the master's cap (welcome). */
  readonly maxLogBytes: number;
  /** Says whether the leased cards show no process of this execution any more (local receipts; absent for sim cards). */
  readonly checkCardsClean?: () => Promise<{ clean: boolean; detail?: string }>;
  /**
   * The backend's news of a run whose handle's `started` carries no pid (a batch job): in one transaction,
   * `record` writes the backend's facts with the execution, then the execution is reported at `phase`
   * (`started` moves it on from `accepted`). Returns whether it moved the execution to `started`.
   */
  readonly onProgress: (phase: 'accepted' | 'started', record: () => void) => boolean;
}

/** Execution ids become a directory name, so they must be one plain path segment. */
export const SAFE_SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;

/** Why `id` cannot name an execution's directory (not one safe segment of at most 128), or null. */
export function executionIdProblem(id: string): string | null {
  return SAFE_SEGMENT.test(id) && id.length <= 128
    ? null
    : `execution id ${JSON.stringify(id)} is not usable as a directory name`;
}

/** What is known once the task's main process has exited and its outputs are collected. */
export interface ExecutionExit {
  /** The main process's exit code; null when it was killed by a signal or never started. */
  readonly exit_code: number | null;
  /** The signal that killed the main process, e.g. `SIGKILL`; null otherwise. */
  readonly signal: string | null;
  /** Why the execution failed; null on success. Cleanup is reported separately in `cleaned`. */
  readonly failure_reason: FailureReason | null;
  /** Declared outputs that were found, with their bytes. */
  readonly outputs: CollectedOutput[];
  /** Outputs refused (escapes, not regular files, too large) or required but missing, one line each. */
  readonly output_errors: string[];
  /** Problems writing the log files or delivering chunks; the task itself was not affected. */
  readonly log_errors: string[];
  /** Why the task could not be started, when failure_reason is SETUP_FAILED. */
  readonly setup_error?: string;
  /** The limit the task broke (OUT_OF_MEMORY, DISK_LIMIT) and what the worker enforced, one line each. */
  readonly limits_detail?: readonly string[];
}

/** The final result: the exit plus the cleanup receipt. */
export interface ExecutionResult extends ExecutionExit {
  /** True when the group was gone and the cards clean within the cleanup timeout. */
  readonly cleaned: boolean;
  /** What the cleanup check saw, e.g. which processes survived. */
  readonly cleanup_detail: string;
}

/**
 * The exit of a run whose task never ran to an exit of its own: it was not started (setup failed,
 * cancelled first) or the executor itself failed. Shared by the local and the Slurm executor.
 */
export function exitWithoutTask(
  reason: 'SETUP_FAILED' | 'CANCELLED' | 'PREEMPTED' | 'TIMED_OUT',
  setupError?: string,
): ExecutionExit {
  return {
    exit_code: null,
    signal: null,
    failure_reason: reason,
    outputs: [],
    output_errors: [],
    log_errors: [],
    ...(setupError === undefined ? {} : { setup_error: setupError }),
  };
}

/** A running execution. */
export interface ExecutionHandle {
  /** The plan's execution id. */
  readonly executionId: string;
  /** The task's pid (= its process group id) once spawned; undefined before or when it never started. */
  readonly pid: number | undefined;
  /** Settles with the pid once the process runs, or null when it never will (setup failed, cancelled). */
  readonly started: Promise<number | null>;
  /** Settles when the main process has exited, leftovers are killed and outputs are collected. */
  readonly exited: Promise<ExecutionExit>;
  /** Settles with the full result after the cleanup receipt (or its timeout). */
  readonly done: Promise<ExecutionResult>;
  /**
   * Stops the execution (SIGTERM, grace, SIGKILL to the group) with failure CANCELLED, or PREEMPTED with
   * the spec's `preemption_grace_seconds` when `preempt` (the scheduler reclaims its cards); idempotent.
   */
  cancel(reason: string, opts?: { readonly preempt?: boolean }): void;
  /**
   * Present when the task outlives the worker (a Slurm job): stops watching it without touching it, so
   * the next worker process resumes it. A clean stop detaches such executions instead of cancelling them.
   */
  detach?(): void;
}
