import { receiptDeadline, transitionExecution, withdrawable } from '../../domain/machines/execution.js';
import { leaseAccepts } from '../../domain/machines/lease.js';
import { taskAccepts } from '../../domain/machines/task.js';
import type { ExecutionRecord } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';
import type { Fleet } from '../fleet.js';
import { markExecutionLost, moveExecution, unreachableReason } from '../machines/execution.js';
import { moveLease } from '../machines/lease.js';
import { moveTask } from '../machines/task.js';
import { enqueueForWorker } from '../workers/link.js';

/**
 * The deadline sweep for executions (runs every `sweep_interval_ms`; deadlines are computed from stored
 * times, so a master restart loses none):
 *  - an assign the master never heard accepted, to a worker now offline that starts nothing before the
 *    master acknowledged its acceptance, is withdrawn at once (`withdrawable`): the task goes back to
 *    the queue for another worker, fenced by epoch, with no new review (docs/operations.md "Partitions");
 *  - a worker silent past `worker_offline_seconds` is offline; its executions get `lease_grace_seconds`
 *    to reappear, then the task is RECONCILIATION_REQUIRED and its lease QUARANTINED — the cards are not
 *    freed on a guess;
 *  - an execution that exited but whose cleanup receipt is overdue (`receiptDeadline`,
 *    src/domain/machines/execution.ts: cleanup timeout plus two offline windows, counted only while the worker is
 *    reachable — from the exit, its latest reconnection or the master's last refusal of its messages for
 *    lack of disk space, whichever is later) has its lease quarantined and its task failed
 *    CLEANUP_UNCONFIRMED. A partition between the exit report and the receipt therefore never fails a
 *    task that exited 0 (docs/operations.md "Partitions"): offline past grace it is RECONCILIATION_REQUIRED, which the
 *    receipt settles when the link heals.
 * Returns how many executions it moved.
 */
export function sweepExecutions(deps: BrokerDeps, fleet: Fleet): number {
  const now = deps.clock.now();
  const { lease_grace_seconds, cleanup_timeout_seconds, worker_offline_seconds } = deps.config.timing;
  let moved = 0;
  fleet.sweep(now);
  deps.store.transaction(() => {
    for (const e of deps.store.leases.unfinished()) {
      const live = fleet.get(e.worker_id);
      const task = deps.store.tasks.get(e.task_id);
      const lease = deps.store.leases.lease(e.lease_id);
      if (!task || !lease) continue;
      if (
        withdrawable({
          phase: e.phase,
          worker_offline: live.offline_since !== null,
          starts_after_ack: live.starts_after_ack,
        }) &&
        withdrawExecution(deps, e)
      ) {
        moved++;
        continue;
      }
      if (live.offline_since !== null && now - live.offline_since >= lease_grace_seconds * 1000) {
        if (
          markExecutionLost(
            deps,
            e,
            'sweeper',
            'worker lost past grace',
            { worker_id: e.worker_id, offline_since: live.offline_since },
            unreachableReason(e.worker_id, live.last_message_at ?? live.offline_since),
          )
        )
          moved++;
        continue;
      }
      // A receipt may wait in the worker's outbox behind messages a full master refused (ADR 0016),
      // or behind a partition (docs/operations.md "Partitions"): the window runs only while the worker is reachable.
      const overdueAt = receiptDeadline({
        exited_at: e.updated_at,
        refused_at: deps.storage?.lastRefusalAt() ?? null,
        reachable_since: live.offline_since === null ? live.connected_at : null,
        window_ms: (cleanup_timeout_seconds + 2 * worker_offline_seconds) * 1000,
      });
      if (e.phase === 'exited' && lease.state === 'RELEASING' && overdueAt !== null && now >= overdueAt) {
        moveLease(deps, lease, 'quarantine', 'sweeper', 'cleanup receipt overdue');
        if (task.state === 'FINALIZING')
          moveTask(deps, task, 'cleanup_failed', 'sweeper', { failure_reason: 'CLEANUP_UNCONFIRMED' });
        moveExecution(deps, e, 'cleanup_failed', 'sweeper', { detail: 'cleanup receipt overdue' });
        moved++;
      }
    }
  });
  return moved;
}

/**
 * Withdraws an assign the worker never acknowledged accepting (see `withdrawable`): the execution is
 * `rejected` (`withdraw`), its lease RELEASED (`withdrawn`), its task QUEUED again (`requeued`; CANCELLED
 * at once if a cancel was asked for meanwhile), each audited; the assign leaves the outbox and a `cancel`
 * follows it, so a worker that did receive it ends it unstarted. A later epoch fences every card the
 * next lease takes. Returns whether it moved. Call inside a transaction.
 */
function withdrawExecution(deps: BrokerDeps, e: ExecutionRecord): boolean {
  const task = deps.store.tasks.get(e.task_id);
  const lease = deps.store.leases.lease(e.lease_id);
  if (!task || !lease || lease.lease_epoch !== e.lease_epoch) return false;
  if (!transitionExecution(e.phase, 'withdraw').ok) return false;
  if (!taskAccepts(task.state, 'requeued') || !leaseAccepts(lease.state, 'withdrawn')) return false;
  const w = e.worker_id;
  const detail = `withdrawn: worker ${w} fell silent before the master recorded its acceptance`;
  moveExecution(deps, e, 'withdraw', 'sweeper', { detail });
  moveLease(deps, lease, 'withdrawn', 'sweeper', detail);
  const queued = moveTask(
    deps,
    task,
    'requeued',
    'sweeper',
    {
      reason: {
        code: 'requeued',
        worker_id: w,
        message: `worker ${w} became unreachable before it started the task; the task went back to the queue for another worker (no new review)`,
      },
    },
    { worker_id: w, execution_id: e.id, lease_epoch: e.lease_epoch },
  );
  if (queued.desired === 'cancel')
    moveTask(deps, queued, 'cancel_queued', 'sweeper', { failure_reason: 'CANCELLED' });
  deps.store.outbox.withdrawAssign(w, e.id, deps.clock.now());
  enqueueForWorker(deps, deps.cluster.link, w, {
    type: 'cancel',
    execution_id: e.id,
    lease_epoch: e.lease_epoch,
    reason: detail,
  });
  deps.store.afterCommit(() => deps.cluster.requestPass());
  return true;
}
