import {
  EXECUTION_TABLE,
  type ExecutionEvent,
  type ExecutionPhase,
  type ReportedPhase,
} from '../../domain/machines/execution.js';
import { leaseAccepts } from '../../domain/machines/lease.js';
import { type TaskEvent, taskAccepts, WORKER_UNREACHABLE } from '../../domain/machines/task.js';
import type { ExecutionRecord } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';
import { applyMove } from './apply-move.js';
import { moveLease } from './lease.js';
import { moveTask } from './task.js';

/** Fields a move may set on an execution besides its phase. */
export type ExecutionChanges = Partial<
  Pick<ExecutionRecord, 'exit_code' | 'signal' | 'failure_reason' | 'outputs' | 'detail'>
>;

/** An execution as `applyMove` sees a stored machine: its phase is the state. */
interface ExecutionMachine {
  id: string;
  state: ExecutionPhase;
  execution: ExecutionRecord;
}

/**
 * The only place the master assigns an execution's phase (ADR 0014): EXECUTION_TABLE through
 * `applyMove` — compare-and-set on the stored phase (CONFLICT if it moved underneath), an audit row
 * `execution.<event>` in the same transaction. `event` is a reported phase, or `reconcile` (operator).
 * Worker reports are decided first by `executionStep` (duplicates ignored, illegal ones refused); what
 * reaches this function is a move the table allows. Call inside a transaction.
 */
export function moveExecution(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>,
  e: ExecutionRecord,
  event: ExecutionEvent,
  actor: string,
  changes: ExecutionChanges = {},
): ExecutionRecord {
  const moved = applyMove<'execution', ExecutionPhase, ExecutionMachine>(deps, {
    kind: 'execution',
    table: EXECUTION_TABLE,
    record: { id: e.id, state: e.phase, execution: e },
    event,
    actor,
    next: (to, now) => ({
      id: e.id,
      state: to,
      execution: { ...e, ...changes, phase: to, updated_at: now },
    }),
    save: (next, expected) => deps.store.leases.updateExecution(next.execution, expected),
    data: { task_id: e.task_id, worker_id: e.worker_id, lease_epoch: e.lease_epoch },
    topics: [],
  });
  return moved.execution;
}

/**
 * The fate of an execution is unknown (its worker was lost past grace, or came back with no record of
 * it): its task becomes RECONCILIATION_REQUIRED and its lease QUARANTINED, so the cards are not freed on
 * a guess. A later worker report, the worker's return with the execution alive (`resumeExecution`, only
 * when `taskReason` says the worker was merely unreachable) or an operator reconcile settles it. Returns
 * whether the task moved. Call inside a transaction. An execution whose lease was released no longer
 * speaks for its task: a preempted task queued again (docs/operations.md "Borrowing and reclaim") may run
 * elsewhere by now, so a stale or illegal report of its old run (under that run's own epoch) leaves it be.
 */
export function markExecutionLost(
  deps: BrokerDeps,
  e: ExecutionRecord,
  actor: string,
  reason: string,
  data: Record<string, unknown>,
  taskReason: Record<string, unknown> | null = null,
): boolean {
  const task = deps.store.tasks.get(e.task_id);
  const lease = deps.store.leases.lease(e.lease_id);
  if (!task || !lease) return false;
  let moved = false;
  if (lease.state !== 'RELEASED' && taskAccepts(task.state, 'worker_lost')) {
    moveTask(deps, task, 'worker_lost', actor, { reason: taskReason }, { ...data, reason });
    moved = true;
  }
  if (leaseAccepts(lease.state, 'quarantine')) moveLease(deps, lease, 'quarantine', actor, reason);
  return moved;
}

/**
 * The task `reason` the sweeper records when it gives up on a silent worker (code `worker_unreachable`):
 * since when nothing was heard, and what happens next, in words an agent can act on. `resumeExecution`
 * reads `unreachable_since` back.
 */
export function unreachableReason(workerId: string, lastHeardAt: number): Record<string, unknown> {
  const since = new Date(lastHeardAt).toISOString();
  return {
    code: WORKER_UNREACHABLE,
    worker_id: workerId,
    unreachable_since: since,
    message: `worker ${workerId} has not been heard from since ${since}; the task may still be running there. If the worker comes back listing it, the task goes back to RUNNING by itself; if it never does, an operator reconciles it.`,
  };
}

/**
 * A returning worker listed, under the same epoch, an execution the master had parked only because the
 * worker fell silent (`resume`, src/domain/machines/worker-reconcile.ts): the lease goes back to ACTIVE, the task
 * to RUNNING (`worker_returned`) or ASSIGNED (`worker_returned_unstarted`), each through its table with
 * compare-and-set and an audit row; the task's `reason` says how long the worker was unreachable and that
 * the task kept running. Returns whether it moved. Call inside the hello transaction.
 */
export function resumeExecution(
  deps: BrokerDeps,
  e: ExecutionRecord,
  event: Extract<TaskEvent, 'worker_returned' | 'worker_returned_unstarted'>,
  phase: ReportedPhase,
  data: Record<string, unknown>,
): boolean {
  const task = deps.store.tasks.get(e.task_id);
  const lease = deps.store.leases.lease(e.lease_id);
  if (!task || !lease || lease.lease_epoch !== e.lease_epoch) return false;
  if (!taskAccepts(task.state, event) || !leaseAccepts(lease.state, 'worker_returned')) return false;
  const now = deps.clock.now();
  const sinceText = task.reason?.unreachable_since;
  const since = typeof sinceText === 'string' ? Date.parse(sinceText) : Number.NaN;
  const seconds = Number.isFinite(since) ? Math.max(0, Math.round((now - since) / 1000)) : null;
  const outage = seconds === null ? 'was unreachable' : `was unreachable for ${seconds} s`;
  const kept = event === 'worker_returned' ? 'the task kept running' : 'the task had not started yet';
  moveLease(deps, lease, 'worker_returned', 'master', `worker ${e.worker_id} returned; execution ${phase}`);
  moveTask(
    deps,
    task,
    event,
    'master',
    {
      reason: {
        code: 'worker_returned',
        worker_id: e.worker_id,
        unreachable_since: typeof sinceText === 'string' ? sinceText : null,
        returned_at: new Date(now).toISOString(),
        unreachable_seconds: seconds,
        message: `worker ${e.worker_id} ${outage}; ${kept}`,
      },
    },
    { ...data, execution_id: e.id, lease_epoch: e.lease_epoch, phase, unreachable_seconds: seconds },
  );
  return true;
}
