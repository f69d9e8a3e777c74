import type { Principal } from '../../store/principals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { canReadAll } from '../principals.js';

/** The cluster's health at a glance: live leases, task counts and the alerts an operator acts on. */
export function getStatus(deps: BrokerDeps, principal: Principal) {
  const now = deps.clock.now();
  const alerts: Array<{
    kind:
      | 'card_quarantined'
      | 'sampler_error'
      | 'worker_offline'
      | 'task_needs_reconciliation'
      | 'audit_chain_broken'
      | 'worker_unisolated'
      | 'grant_failing'
      | 'disk_low'
      | 'disk_full';
    severity: 'warning' | 'critical';
    subject: string;
    message: string;
    action: string;
  }> = [];
  const readAll = canReadAll(principal);
  // Task ids are shown only to those who may read the task (the owner, reviewers, operators).
  const taskRef = (taskId: string) =>
    readAll || deps.store.tasks.get(taskId)?.owner_id === principal.id ? taskId : 'TASK';
  const leases = deps.store.leases.liveLeases();
  for (const l of leases) {
    if (l.state === 'QUARANTINED')
      alerts.push({
        kind: 'card_quarantined',
        severity: 'critical',
        subject: `${l.worker_id}:${l.cards.map((c) => c.index).join(',')}`,
        message: `cards held by quarantined lease ${l.id} (task ${taskRef(l.task_id)}): ${l.reason ?? 'cleanup not confirmed'}`,
        action: `Check the cards on ${l.worker_id}, then gpu-broker reconcile ${taskRef(l.task_id)} --resolution FAILED --reason "…"`,
      });
  }
  for (const w of deps.store.workers.list()) {
    const live = deps.cluster.fleet.get(w.id);
    if (!deps.cluster.fleet.isOnline(w.id, now))
      alerts.push({
        kind: 'worker_offline',
        severity: 'warning',
        subject: w.id,
        message: `worker ${w.id} is offline${live.offline_since !== null ? ` since ${new Date(live.offline_since).toISOString()}` : ''}`,
        action:
          'Check the worker process and its network; running tasks wait lease_grace_seconds, then need reconciliation.',
      });
    else if (live.sampler_error)
      alerts.push({
        kind: 'sampler_error',
        severity: 'warning',
        subject: w.id,
        message: `worker ${w.id} cannot sample its cards: ${live.sampler_error}`,
        action: 'Its cards are UNKNOWN and not scheduled; check nvidia-smi / hy-smi on the host.',
      });
  }
  // Loud on purpose: a worker without a sandbox lets a task see the whole host. Critical when the
  // policy lets tasks run there anyway; a warning when require_isolation keeps tasks off it.
  const requireIsolation = deps.config.policy.require_isolation;
  for (const w of deps.store.workers.list()) {
    if (w.isolation !== 'none') continue;
    alerts.push({
      kind: 'worker_unisolated',
      severity: requireIsolation ? 'warning' : 'critical',
      subject: w.id,
      message: requireIsolation
        ? `worker ${w.id} is UNISOLATED (no task sandbox); policy.require_isolation keeps every task off it`
        : `worker ${w.id} is UNISOLATED: its tasks run without a sandbox and can see the whole host`,
      action:
        'Restart the worker with bubblewrap isolation (gpu-broker worker --isolation bwrap, the default where bwrap is installed).',
    });
  }
  for (const f of deps.cluster.failingGrants())
    alerts.push({
      kind: 'grant_failing',
      severity: 'critical',
      subject: taskRef(f.task_id),
      message: `granting cards to task ${taskRef(f.task_id)} failed ${f.failures} times in a row: ${f.error}`,
      action: `The scheduler retries at ${new Date(f.retry_at).toISOString()} with a growing delay; check the worker's card list (duplicate indexes or uuids) and the master log.`,
    });
  for (const t of deps.store.tasks.inState('RECONCILIATION_REQUIRED'))
    alerts.push({
      kind: 'task_needs_reconciliation',
      severity: 'critical',
      subject: taskRef(t.id),
      message: `task ${taskRef(t.id)} lost its worker; its outcome is unknown`,
      action: `If the worker will not come back: gpu-broker reconcile ${taskRef(t.id)} --resolution FAILED --reason "…"`,
    });
  const storage = deps.storage?.status();
  if (storage && storage.state !== 'ok')
    alerts.push({
      kind: storage.state === 'low' ? 'disk_low' : 'disk_full',
      severity: storage.state === 'low' ? 'warning' : 'critical',
      subject: 'data_dir',
      message:
        storage.state === 'low'
          ? `the master's disk is getting full: ${storage.detail ?? 'low on space'}`
          : `the master refuses new work, logs and outputs (UNAVAILABLE): ${storage.detail ?? 'out of space'}`,
      action:
        'Free space on the data dir filesystem (old task logs and outputs go with storage.retention; the worker outboxes keep what was refused and resend it); /healthz answers 503 until the store takes writes again.',
    });
  const audit = deps.auditStatus();
  if (!audit.ok)
    alerts.push({
      kind: 'audit_chain_broken',
      severity: 'critical',
      subject: 'audit_events',
      message: audit.detail ?? 'audit chain broken',
      action: 'Run gpu-broker audit verify and investigate the named row.',
    });
  return {
    tasks_by_state: deps.store.tasks.countByState(),
    leases: leases.map((l) => ({
      lease_id: l.id,
      task_id: readAll || deps.store.tasks.get(l.task_id)?.owner_id === principal.id ? l.task_id : null,
      worker_id: l.worker_id,
      cards: l.cards.map((c) => c.index),
      lease_epoch: l.lease_epoch,
      state: l.state,
      reason: l.reason,
    })),
    alerts,
  };
}
