import type { FailureReason } from '../../contracts/worker-protocol.js';
import { accepts, isFinal, type TransitionTable, terminalStates } from './state-machine.js';

/**
 * Task state machine (docs/state-machines.md). Desired state (`run` | `cancel`) is a separate field; these
 * are observed states.
 *
 * States:
 * - `QUEUED`: approved, waiting for cards; carries a `reason` and a queue position.
 * - `ASSIGNED`: a lease was granted and the plan sent; the worker has not reported `started`. If the
 *   worker falls silent before the master recorded its acceptance, the task goes back to `QUEUED`
 *   (`requeued`; no new review) and another worker may run it (docs/operations.md "Partitions").
 * - `RUNNING`: the worker reported the process started.
 * - `FINALIZING`: the process exited and outputs were collected; waiting for the cleanup receipt. A run
 *   the scheduler preempted (failure PREEMPTED) goes back to `QUEUED` once its cards are proven clean
 *   (`cleaned_preempted`): the same approved revision, its old place in the queue, no new review
 *   (docs/operations.md "Borrowing and reclaim").
 * - `COMPLETED` (terminal): exit 0, outputs present, cleanup confirmed.
 * - `FAILED` (terminal): see `failure_reason`.
 * - `CANCELLED` (terminal): cancelled by its owner or an operator (cleanup confirmed if it ran).
 * - `RECONCILIATION_REQUIRED`: the fate of the execution is unknown (worker lost past grace); only a
 *   worker report, the worker's return listing the execution as alive (`worker_returned`, back to
 *   `RUNNING`; `worker_returned_unstarted`, back to `ASSIGNED`) or an operator reconcile leaves it.
 */
export const TASK_STATES = [
  'QUEUED',
  'ASSIGNED',
  'RUNNING',
  'FINALIZING',
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'RECONCILIATION_REQUIRED',
] as const;
/** A task state. */
export type TaskState = (typeof TASK_STATES)[number];

/** Events that move a task. */
export const TASK_EVENTS = [
  'lease_granted',
  'worker_rejected',
  'started',
  'exited',
  'cleaned_success',
  'cleaned_failure',
  'cleaned_cancelled',
  'cleaned_preempted',
  'cleanup_failed',
  'cancel_queued',
  'worker_lost',
  'worker_returned',
  'worker_returned_unstarted',
  'requeued',
  'reconcile_completed',
  'reconcile_failed',
  'reconcile_cancelled',
] as const;
/** A task event. */
export type TaskEvent = (typeof TASK_EVENTS)[number];

/** The task transition table; docs/state-machines.md shows it. */
export const TASK_TABLE: TransitionTable<TaskState, TaskEvent> = {
  QUEUED: { lease_granted: 'ASSIGNED', cancel_queued: 'CANCELLED' },
  ASSIGNED: {
    requeued: 'QUEUED',
    started: 'RUNNING',
    exited: 'FINALIZING',
    worker_rejected: 'FAILED',
    worker_lost: 'RECONCILIATION_REQUIRED',
    cleanup_failed: 'FAILED',
  },
  RUNNING: { exited: 'FINALIZING', worker_lost: 'RECONCILIATION_REQUIRED', cleanup_failed: 'FAILED' },
  FINALIZING: {
    cleaned_success: 'COMPLETED',
    cleaned_failure: 'FAILED',
    cleaned_cancelled: 'CANCELLED',
    cleaned_preempted: 'QUEUED',
    cleanup_failed: 'FAILED',
    worker_lost: 'RECONCILIATION_REQUIRED',
  },
  RECONCILIATION_REQUIRED: {
    requeued: 'QUEUED',
    worker_returned: 'RUNNING',
    worker_returned_unstarted: 'ASSIGNED',
    started: 'RUNNING',
    exited: 'FINALIZING',
    cleaned_success: 'COMPLETED',
    cleaned_failure: 'FAILED',
    cleaned_cancelled: 'CANCELLED',
    cleaned_preempted: 'QUEUED',
    cleanup_failed: 'FAILED',
    worker_rejected: 'FAILED',
    reconcile_completed: 'COMPLETED',
    reconcile_failed: 'FAILED',
    reconcile_cancelled: 'CANCELLED',
  },
  COMPLETED: {},
  FAILED: {},
  CANCELLED: {},
};

/** True once a task can no longer change (COMPLETED, FAILED, CANCELLED): no event leaves its state. */
export function isTerminalTask(state: TaskState): boolean {
  return isFinal(TASK_TABLE, state);
}

/** The terminal task states, in table order: those with no outgoing edge. */
export const TERMINAL_TASK_STATES: readonly TaskState[] = terminalStates(TASK_TABLE);

/**
 * True when a task waits for nothing more on its own: it is terminal, or its fate is unknown and only
 * an operator's reconcile (or a late worker report) moves it — the states in which it takes a
 * `reconcile_*` event. wait_for_task returns at once there.
 */
export function isSettledTask(state: TaskState): boolean {
  return isTerminalTask(state) || taskAccepts(state, 'reconcile_completed');
}

/**
 * The task reason code the sweeper records when it gives up on a silent worker: the one cause of
 * RECONCILIATION_REQUIRED a returning worker resumes (src/domain/machines/worker-reconcile.ts, `resume`).
 */
export const WORKER_UNREACHABLE = 'worker_unreachable';

/**
 * Whether wait_for_task stops waiting: the task settled (`isSettledTask`), except a task parked only
 * because its worker fell silent (RECONCILIATION_REQUIRED with reason `worker_unreachable`): it may
 * well be running still and come back by itself, so a waiter keeps waiting (an agent
 * told "settled" either spun or gave up on a task that would complete). `reasonCode` is the code of the
 * task's `reason`.
 */
export function waitSettles(state: TaskState, reasonCode: string | null): boolean {
  if (state === 'RECONCILIATION_REQUIRED' && reasonCode === WORKER_UNREACHABLE) return false;
  return isSettledTask(state);
}

/** Whether TASK_TABLE lets `event` move a task that is `state` (the guard, never a list of states). */
export function taskAccepts(state: TaskState, event: TaskEvent): boolean {
  return accepts(TASK_TABLE, state, event);
}

/** What a worker's exit report says about how the process ended. */
export interface ExitReport {
  exit_code: number | null;
  signal: string | null;
  failure_reason: FailureReason | null;
}

/**
 * The failure an exit report amounts to. A process that exited 0 with no signal finished on its own:
 * when the worker also says `CANCELLED`, its cancel arrived after the exit had happened but before it
 * was reported (seen with a frozen worker), so the cancel never took effect and the task ends
 * like any clean exit (outputs checked, then `COMPLETED`), as cancel_task documents. A task that traps
 * SIGTERM and exits 0 within the grace period is indistinguishable here and is treated the same way:
 * it finished cleanly.
 */
export function exitFailure(exit: ExitReport): FailureReason | null {
  if (exit.failure_reason === 'CANCELLED' && exit.exit_code === 0 && exit.signal === null) return null;
  return exit.failure_reason;
}

/**
 * The event a cleanup receipt moves a task with: `cleaned_cancelled` when the failure is `CANCELLED`,
 * or a cancel was desired and there is any failure (a cancel wins over a preemption); `cleaned_preempted`
 * when the scheduler preempted it (back to the queue); `cleaned_failure` for any other failure; else
 * `cleaned_success` (a clean exit stays a success even when a cancel was requested too late).
 */
export function cleanedEvent(failure: string | null, desired: 'run' | 'cancel'): TaskEvent {
  if (failure === 'CANCELLED' || (desired === 'cancel' && failure !== null)) return 'cleaned_cancelled';
  if (failure === 'PREEMPTED') return 'cleaned_preempted';
  return failure ? 'cleaned_failure' : 'cleaned_success';
}

/**
 * The failure an exit amounts to when the master knows whether it asked the run's lease to be
 * preempted (`preempting`): PREEMPTED only then — a worker's PREEMPTED without the master's request is
 * judged by the exit alone (a task cannot requeue itself), and an older worker's CANCELLED for a
 * preempted lease (it ignores the `preempt` flag) is PREEMPTED unless its owner asked for the cancel.
 */
export function exitFailureWithPreemption(
  exit: ExitReport,
  preempting: boolean,
  desired: 'run' | 'cancel',
): FailureReason | null {
  if (exit.failure_reason === 'PREEMPTED' && !preempting) return judgedExit(exit);
  // The worker restarted while the run was being preempted: the run is gone either way, its cards were
  // asked back, so it is requeued as a preempted run rather than failed (ADR 0044).
  if (exit.failure_reason === 'WORKER_LOST' && preempting && desired === 'run') return 'PREEMPTED';
  if (exit.failure_reason === 'CANCELLED' && preempting && desired === 'run') {
    const failure = exitFailure(exit);
    return failure === null ? null : 'PREEMPTED';
  }
  return exitFailure(exit);
}

/** The failure of an exit without a worker's reason: a signal, a non-zero code, or none. */
function judgedExit(exit: ExitReport): FailureReason | null {
  if (exit.signal !== null) return 'KILLED_BY_SIGNAL';
  if (exit.exit_code !== 0) return 'EXIT_NONZERO';
  return null;
}
