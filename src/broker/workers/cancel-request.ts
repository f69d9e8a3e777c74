import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { TASKS_TOPIC } from '../topics.js';
import { enqueueForWorker } from './link.js';

/**
 * Asks the worker holding task `t` (ASSIGNED or later, not ended) to cancel it: `desired: cancel`
 * (compare-and-set on its state), a `task.cancel_requested` audit row, and a `cancel` message on the
 * lease's execution. False when it was already asked or changed meanwhile. cancel_task and the grant
 * fence's unstarted runs (below) share it.
 */
export function requestTaskCancel(deps: BrokerDeps, actor: string, t: TaskRecord): boolean {
  if (t.desired === 'cancel') return false;
  const now = deps.clock.now();
  if (!deps.store.tasks.update({ ...t, desired: 'cancel', updated_at: now }, t.state)) return false;
  deps.store.audit.append({
    at: now,
    actor,
    action: 'task.cancel_requested',
    subject_type: 'task',
    subject_id: t.id,
    data: { state: t.state },
  });
  const lease = deps.store.leases.latestLeaseForTask(t.id);
  const e = lease ? deps.store.leases.executionForLease(lease.id) : undefined;
  if (lease && e)
    enqueueForWorker(deps, deps.cluster.link, lease.worker_id, {
      type: 'cancel',
      execution_id: e.id,
      lease_epoch: lease.lease_epoch,
      reason: `cancelled by ${actor}`,
    });
  deps.store.afterCommit(() => deps.notifier.notify(TASKS_TOPIC));
  return true;
}

/**
 * Cancels every run grant `grantId` approved that a worker holds but has not started (ASSIGNED: inputs
 * staging, a Slurm job pending), once the grant lapsed (revoked, expired): "runs that expire or are
 * revoked before they start do not start" (ADR 0029) covers them as much as the queued ones
 * (src/broker/grant-fence.ts). Returns their ids.
 */
export function cancelUnstartedRunsOf(deps: BrokerDeps, grantId: string, actor: string): string[] {
  const cancelled: string[] = [];
  for (const run of deps.store.grants.openRuns(grantId)) {
    const t = deps.store.tasks.get(run.task_id);
    if (t?.state === 'ASSIGNED' && requestTaskCancel(deps, actor, t)) cancelled.push(t.id);
  }
  return cancelled;
}
