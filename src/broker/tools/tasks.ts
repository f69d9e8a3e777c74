import { BrokerError } from '../../contracts/errors.js';
import type { TaskView } from '../../contracts/views.js';
import { transitionExecution } from '../../domain/machines/execution.js';
import { leaseAccepts, leaseHoldsCards } from '../../domain/machines/lease.js';
import { isTerminalTask, type TaskState, waitSettles } from '../../domain/machines/task.js';
import { executionWhereabouts } from '../../domain/machines/worker-reconcile.js';
import type { LeaseRecord } from '../../store/leases-repo.js';
import type { Principal } from '../../store/principals-repo.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { moveExecution } from '../machines/execution.js';
import { moveLease } from '../machines/lease.js';
import { moveTask } from '../machines/task.js';
import { canReadAll } from '../principals.js';
import { taskTopic } from '../topics.js';
import { requestTaskCancel } from '../workers/cancel-request.js';
import { enqueueForWorker } from '../workers/link.js';
import { fetchPage } from './paging.js';
import { taskSummary, taskView } from './views.js';
import { waitUntil } from './wait-until.js';

/**
 * Use cases of tasks: read, list, wait, cancel and reconcile (the one function that moves a task's state
 * is machines/task.ts).
 */

/** Loads a task the principal may see; others' tasks are NOT_FOUND (no existence leak). */
export function loadVisibleTask(deps: BrokerDeps, principal: Principal, id: string): TaskRecord {
  const t = deps.store.tasks.get(id);
  if (!t || (t.owner_id !== principal.id && !canReadAll(principal))) throw notFound(id);
  return t;
}

function notFound(id: string): BrokerError {
  return new BrokerError('NOT_FOUND', `no task ${id}`, 'Check the id; list_tasks shows yours.');
}

export function getTask(deps: BrokerDeps, principal: Principal, taskId: string): TaskView {
  return taskView(deps.store, loadVisibleTask(deps, principal, taskId), deps.observe);
}

/** list_tasks. */
export function listTasks(
  deps: BrokerDeps,
  principal: Principal,
  q: { state?: TaskState | undefined; limit?: number | undefined; cursor?: string | undefined },
) {
  const { page, next_cursor } = fetchPage(q.limit, (limit) =>
    deps.store.tasks.list({
      limit,
      ...(canReadAll(principal) ? {} : { owner_id: principal.id }),
      ...(q.state ? { state: q.state } : {}),
      ...(q.cursor ? { before_id: q.cursor } : {}),
    }),
  );
  return { tasks: page.map((t) => taskSummary(deps.store, t, deps.observe)), next_cursor };
}

/**
 * wait_for_task: returns when the task settles or after the timeout. A task parked because its worker
 * fell silent is not settled here (`waitSettles`): it may come back by itself.
 */
export async function waitForTask(
  deps: BrokerDeps,
  principal: Principal,
  taskId: string,
  timeoutSeconds: number,
  signal?: AbortSignal,
): Promise<{ task: TaskView; timed_out: boolean }> {
  // Each wake-up reads the task's state facts only; the whole task (its spec parsed) once, for the answer.
  const { timed_out } = await waitUntil(
    deps,
    taskTopic(taskId),
    timeoutSeconds * 1000,
    () => {
      const t = deps.store.tasks.stateFacts(taskId);
      if (!t || (t.owner_id !== principal.id && !canReadAll(principal))) throw notFound(taskId);
      return t;
    },
    (t) => waitSettles(t.state, t.reason_code),
    signal,
  );
  return { task: taskView(deps.store, loadVisibleTask(deps, principal, taskId), deps.observe), timed_out };
}

/** cancel_task: a queued task ends now; a placed one is stopped by its worker and ends on the receipt. */
export function cancelTask(deps: BrokerDeps, principal: Principal, taskId: string) {
  const t = loadVisibleTask(deps, principal, taskId);
  if (t.owner_id !== principal.id && !principal.roles.includes('operator'))
    throw new BrokerError(
      'FORBIDDEN',
      'only the task’s owner or an operator may cancel it',
      'Ask the owner.',
    );
  return cancelTaskAs(deps, principal.name, t);
}

/**
 * The cancel itself, once the caller may cancel `t` (cancel_task: its owner or an operator; revoke_grant
 * with cancel_running: the reviewer revoking the grant that approved it).
 */
export function cancelTaskAs(deps: BrokerDeps, actor: string, t: TaskRecord) {
  if (t.state === 'QUEUED') {
    const next = moveTask(deps, t, 'cancel_queued', actor, {
      desired: 'cancel',
      failure_reason: 'CANCELLED',
    });
    deps.store.afterCommit(() => deps.cluster.requestPass());
    return { task: taskView(deps.store, next, deps.observe) };
  }
  if (isTerminalTask(t.state))
    throw new BrokerError('INVALID_STATE', `task ${t.id} already ended (${t.state})`, 'Nothing to cancel.', {
      state: t.state,
    });
  // Compare-and-set on the state read above: nothing may have moved the task in between.
  if (t.desired !== 'cancel' && !requestTaskCancel(deps, actor, t))
    throw new BrokerError('CONFLICT', `task ${t.id} changed concurrently`, 'Read it again and retry.');
  return { task: taskView(deps.store, deps.store.tasks.get(t.id)!, deps.observe) };
}

/** Where a held lease's execution stands (executionWhereabouts), from the store and the fleet now. */
export function leaseWhereabouts(deps: BrokerDeps, lease: LeaseRecord, now: number) {
  const e = deps.store.leases.executionForLease(lease.id) ?? null;
  return {
    execution: e,
    whereabouts: executionWhereabouts({
      phase: e?.phase ?? null,
      worker_online: deps.cluster.fleet.isOnline(lease.worker_id, now),
      lease_cards: lease.cards.map((c) => c.index),
      held_cards: deps.cluster.fleet.get(lease.worker_id).held_cards,
    }),
  };
}

/**
 * reconcile_task: the operator records an outcome and releases quarantined cards. Audited. Refused while
 * the worker is online and still runs the execution (docs/operations.md "Partitions"), unless `force`: reconciling sends
 * it a cancel, which kills a task that may well complete.
 */
export function reconcileTask(
  deps: BrokerDeps,
  principal: Principal,
  taskId: string,
  resolution: 'COMPLETED' | 'FAILED' | 'CANCELLED',
  reason: string,
  force = false,
) {
  const t = deps.store.tasks.get(taskId);
  if (!t) throw new BrokerError('NOT_FOUND', `no task ${taskId}`, 'Check the id.');
  const lease = deps.store.leases.latestLeaseForTask(t.id);
  const needsDecision = t.state === 'RECONCILIATION_REQUIRED';
  const leaseHeld = lease !== undefined && leaseHoldsCards(lease.state);
  if (!needsDecision && !(leaseHeld && isTerminalTask(t.state)))
    throw new BrokerError(
      'INVALID_STATE',
      `task ${t.id} is ${t.state} and holds no quarantined cards`,
      'Reconcile applies to RECONCILIATION_REQUIRED tasks and to ended tasks whose lease is still held.',
      { state: t.state },
    );
  const where = lease && leaseHeld ? leaseWhereabouts(deps, lease, deps.clock.now()) : null;
  if (lease && where?.whereabouts === 'running' && !force) {
    const cards = lease.cards.map((c) => c.index).join(',');
    throw new BrokerError(
      'INVALID_STATE',
      `task ${t.id}: worker ${lease.worker_id} is online and still runs execution ${where.execution!.id} (${where.execution!.phase}) on cards ${cards}; reconciling would kill it`,
      `Wait for the worker's reports to settle it (wait_for_task / get_task). To stop it anyway, pass force: true (gpu-broker reconcile ${t.id} --force …): the worker gets a cancel (SIGTERM, then SIGKILL after kill_grace_seconds) and cards ${cards} are freed.`,
      {
        state: t.state,
        worker_id: lease.worker_id,
        execution_id: where.execution!.id,
        phase: where.execution!.phase,
        cards: lease.cards.map((c) => c.index),
        would_kill: true,
      },
    );
  }
  let task = t;
  if (needsDecision) {
    const event =
      resolution === 'COMPLETED'
        ? 'reconcile_completed'
        : resolution === 'CANCELLED'
          ? 'reconcile_cancelled'
          : 'reconcile_failed';
    task = moveTask(
      deps,
      t,
      event,
      principal.name,
      resolution === 'FAILED' ? { failure_reason: t.failure_reason ?? 'WORKER_LOST' } : {},
      { reason },
    );
  }
  let released = false;
  if (lease && leaseHeld) {
    let l = lease;
    // Only a quarantined lease takes reconcile_release: quarantine a held one first.
    if (!leaseAccepts(l.state, 'reconcile_release'))
      l = moveLease(deps, l, 'quarantine', principal.name, `reconcile: ${reason}`);
    moveLease(deps, l, 'reconcile_release', principal.name, `reconcile: ${reason}`);
    const e = deps.store.leases.executionForLease(lease.id);
    if (e && transitionExecution(e.phase, 'reconcile').ok) {
      moveExecution(deps, e, 'reconcile', principal.name, {
        detail: `reconciled by ${principal.name}: ${reason}`,
      });
      // The cards are free now: an assign still waiting for the worker must never arrive, and if the
      // worker did get it, it must stop the execution rather than run on cards granted to others.
      deps.store.outbox.withdrawAssign(lease.worker_id, e.id, deps.clock.now());
      enqueueForWorker(deps, deps.cluster.link, lease.worker_id, {
        type: 'cancel',
        execution_id: e.id,
        lease_epoch: lease.lease_epoch,
        reason: `reconciled by ${principal.name}: ${reason}`,
      });
    }
    released = true;
  }
  deps.store.audit.append({
    at: deps.clock.now(),
    actor: principal.name,
    action: 'task.reconciled',
    subject_type: 'task',
    subject_id: t.id,
    data: {
      resolution,
      reason,
      lease_released: released,
      // What the operator was told was there: a forced reconcile of a live execution is on the record.
      ...(where === null ? {} : { execution: where.whereabouts, force }),
    },
  });
  deps.store.afterCommit(() => deps.cluster.requestPass());
  return { task: taskView(deps.store, task, deps.observe), lease_released: released };
}
