import { BrokerError } from '../../contracts/errors.js';
import type { Principal } from '../../store/principals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { cordonCard, uncordonCard } from '../machines/cordon.js';
import { canReadAll } from '../principals.js';
import { CARDS_TOPIC } from '../topics.js';
import { iso } from './views.js';

/** Use cases for the cluster: cards, queue, workers, cordons and drains (a task's cancel and reconcile: ./tasks.ts). */

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
                cpus_committed: committed.get(w.id)?.cpus ?? 0,
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
