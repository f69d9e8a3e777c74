import { EXECUTION_TABLE, type ExecutionEvent, type ExecutionPhase } from '../../domain/execution.js';
import { leaseAccepts } from '../../domain/lease.js';
import { taskAccepts } from '../../domain/task.js';
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
 * a guess. A later worker report or an operator reconcile settles it. Returns whether the task moved.
 * Call inside a transaction.
 */
export function markExecutionLost(
  deps: BrokerDeps,
  e: ExecutionRecord,
  actor: string,
  reason: string,
  data: Record<string, unknown>,
): boolean {
  const task = deps.store.tasks.get(e.task_id);
  const lease = deps.store.leases.lease(e.lease_id);
  if (!task || !lease) return false;
  let moved = false;
  if (taskAccepts(task.state, 'worker_lost')) {
    moveTask(deps, task, 'worker_lost', actor, {}, { ...data, reason });
    moved = true;
  }
  if (leaseAccepts(lease.state, 'quarantine')) moveLease(deps, lease, 'quarantine', actor, reason);
  return moved;
}
