import { BrokerError } from '../../contracts/errors.js';
import { transitionExecution } from '../../domain/execution.js';
import { leaseAccepts, leaseHoldsCards } from '../../domain/lease.js';
import { isTerminalTask } from '../../domain/task.js';
import { executionWhereabouts } from '../../domain/worker-reconcile.js';
import type { LeaseRecord } from '../../store/leases-repo.js';
import type { Principal } from '../../store/principals-repo.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { cordonCard, uncordonCard } from '../machines/cordon.js';
import { moveExecution } from '../machines/execution.js';
import { moveLease } from '../machines/lease.js';
import { moveTask } from '../machines/task.js';
import { canReadAll } from '../principals.js';
import { CARDS_TOPIC } from '../topics.js';
import { requestTaskCancel } from '../workers/cancel-request.js';
import { enqueueForWorker } from '../workers/link.js';
import { loadVisibleTask } from './tasks.js';
import { iso, taskView } from './views.js';

/** Use cases for the cluster: cards, queue, workers, cordons, drains, cancel and reconcile. */

/** list_cards: task ids are shown only to those who may read the task. */
export function listCards(deps: BrokerDeps, principal: Principal, workerId?: string) {
  const cards = deps.cluster.fleet
    .listCards(deps.store, deps.clock.now(), {
      sample_interval_ms: deps.config.timing.sample_interval_ms,
      vram_threshold_pct: deps.config.scheduling.vram_threshold_pct,
    })
    .filter((c) => workerId === undefined || c.worker_id === workerId)
    .map(({ owner_id, ...c }) => ({
      ...c,
      task_id: owner_id === principal.id || canReadAll(principal) ? c.task_id : null,
    }));
  return { cards, simulated_only: cards.length > 0 && cards.every((c) => c.simulated) };
}

/** get_queue: scheduling order; other owners anonymised. */
export function getQueue(deps: BrokerDeps, principal: Principal) {
  const tasks = deps.store.tasks
    .inState('QUEUED')
    .map((t) => {
      const info = deps.observe.queueInfo(t.id);
      const own = t.owner_id === principal.id || canReadAll(principal);
      return {
        position: info?.position ?? null,
        task_id: own ? t.id : null,
        own: t.owner_id === principal.id,
        title: own ? t.spec.title : null,
        cards: t.spec.cards.count,
        priority: t.priority,
        approved_at: iso(t.approved_at),
        reason: info?.reason ?? t.reason,
      };
    })
    .sort((a, b) => (a.position ?? Number.MAX_SAFE_INTEGER) - (b.position ?? Number.MAX_SAFE_INTEGER));
  return { tasks };
}

/** list_workers. */
export function listWorkers(deps: BrokerDeps) {
  const now = deps.clock.now();
  const committed = deps.store.leases.committedByWorker();
  return {
    workers: deps.store.workers.list().map((w) => {
      const live = deps.cluster.fleet.get(w.id);
      return {
        worker_id: w.id,
        hostname: w.hostname,
        provider: w.provider,
        simulated: w.provider === 'sim',
        online: deps.cluster.fleet.isOnline(w.id, now),
        draining: w.draining,
        cards: live.cards.length || w.cards.length,
        sampler_error: live.sampler_error,
        version: w.version,
        last_seen_at: iso(live.last_message_at ?? w.last_seen_at),
        offline_since: iso(deps.cluster.fleet.offlineSince(w.id, now)),
        isolation: w.isolation,
        container_engine: w.container_engine,
        unisolated: w.isolation === 'none',
        backend: w.backend,
        slurm: w.slurm,
        seccomp: w.seccomp,
        host:
          w.host === null
            ? null
            : {
                ...w.host,
                memory_committed_mib: committed.get(w.id)?.memory_mib ?? 0,
                disk_committed_mib: committed.get(w.id)?.disk_mib ?? 0,
              },
      };
    }),
  };
}

function requireWorker(deps: BrokerDeps, workerId: string) {
  const w = deps.store.workers.get(workerId);
  if (!w) throw new BrokerError('NOT_FOUND', `no worker ${workerId}`, 'list_workers shows enrolled workers.');
  return w;
}

/** drain_worker / undrain_worker. */
export function setDraining(deps: BrokerDeps, principal: Principal, workerId: string, draining: boolean) {
  requireWorker(deps, workerId);
  deps.store.workers.setDraining(workerId, draining);
  deps.store.audit.append({
    at: deps.clock.now(),
    actor: principal.name,
    action: draining ? 'worker.drained' : 'worker.undrained',
    subject_type: 'worker',
    subject_id: workerId,
  });
  deps.store.afterCommit(() => {
    deps.notifier.notify(CARDS_TOPIC);
    deps.cluster.requestPass();
  });
  return { worker_id: workerId, draining };
}

/** remove_worker: only an offline worker that holds nothing may be forgotten. */
export function removeWorker(deps: BrokerDeps, principal: Principal, workerId: string) {
  requireWorker(deps, workerId);
  if (deps.cluster.fleet.isOnline(workerId, deps.clock.now()))
    throw new BrokerError(
      'INVALID_STATE',
      `worker ${workerId} is online`,
      'Stop the worker (and revoke its token) first.',
    );
  if (
    deps.store.leases.liveCards().some((c) => c.worker_id === workerId) ||
    deps.store.leases.unfinishedForWorker(workerId).length > 0
  )
    throw new BrokerError(
      'INVALID_STATE',
      `worker ${workerId} still holds leases or executions`,
      'Reconcile its tasks first (get_status lists them), then remove it.',
    );
  deps.store.workers.remove(workerId);
  deps.store.audit.append({
    at: deps.clock.now(),
    actor: principal.name,
    action: 'worker.removed',
    subject_type: 'worker',
    subject_id: workerId,
  });
  deps.store.afterCommit(() => deps.notifier.notify(CARDS_TOPIC));
  return { worker_id: workerId, removed: true };
}

/** cordon_card / uncordon_card. */
export function setCordon(
  deps: BrokerDeps,
  principal: Principal,
  workerId: string,
  index: number,
  cordon: boolean,
  reason?: string,
) {
  const w = requireWorker(deps, workerId);
  const live = deps.cluster.fleet.get(workerId).cards;
  if (!live.some((c) => c.index === index) && !w.cards.some((c) => c.index === index))
    throw new BrokerError(
      'NOT_FOUND',
      `worker ${workerId} has no card ${index}`,
      'list_cards shows the indexes.',
    );
  const change = {
    worker_id: workerId,
    index,
    actor: principal.name,
    at: deps.clock.now(),
    audit: { reason: reason ?? null },
  };
  if (cordon) cordonCard(deps, { ...change, reason: reason ?? 'cordoned by operator' });
  else uncordonCard(deps, change);
  deps.store.afterCommit(() => {
    deps.notifier.notify(CARDS_TOPIC);
    deps.cluster.requestPass();
  });
  return {
    worker_id: workerId,
    index,
    cordoned: cordon,
    reason: cordon ? (reason ?? 'cordoned by operator') : null,
  };
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
 * the worker is online and still runs the execution (issue 40, item 5), unless `force`: reconciling sends
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
