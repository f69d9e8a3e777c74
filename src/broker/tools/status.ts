import { GRANT_ALERT_RATIO, grantUsage } from '../../domain/grants/grant.js';
import type { LeaseRecord } from '../../store/leases-repo.js';
import type { Principal } from '../../store/principals-repo.js';
import type { QueuedTaskRow } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { canReadAll } from '../principals.js';
import { type AccountStanding, accountStandings, standingWords } from './account-standing.js';
import { leaseWhereabouts } from './tasks.js';

/** One alert of get_status: what is wrong, how bad, and what an operator does about it. */
interface StatusAlert {
  kind:
    | 'card_quarantined'
    | 'leased_card_missing'
    | 'sampler_error'
    | 'worker_offline'
    | 'task_needs_reconciliation'
    | 'audit_chain_broken'
    | 'worker_unisolated'
    | 'grant_failing'
    | 'standing_grant_budget'
    | 'disk_low'
    | 'disk_full';
  severity: 'warning' | 'critical';
  subject: string;
  message: string;
  action: string;
}

/** What every alert source reads. */
interface StatusContext {
  deps: BrokerDeps;
  now: number;
  leases: LeaseRecord[];
  /** A task id as this principal may see it: the id, or `TASK`. */
  taskRef(taskId: string): string;
  /** Whether this principal may see this standing grant (readers of all, or its grantee). */
  mayReadGrant(granteeId: string): boolean;
}

/**
 * What an operator is told about a held lease's execution before any reconcile is suggested (docs/operations.md
 * "Reconcile"): whether its worker is back and the task alive; null when neither applies (the execution ended,
 * or the worker is back without it), where the plain advice stands.
 */
function whereaboutsAdvice(
  { deps, now, taskRef }: StatusContext,
  lease: LeaseRecord,
): { status: string; action: string } | null {
  const task = taskRef(lease.task_id);
  const w = lease.worker_id;
  switch (leaseWhereabouts(deps, lease, now).whereabouts) {
    case 'worker_unreachable': {
      const since = deps.cluster.fleet.offlineSince(w, now);
      const ago =
        since === null
          ? ''
          : ` since ${new Date(since).toISOString()} (${Math.round((now - since) / 1000)} s)`;
      return {
        status: `worker ${w} is unreachable${ago}; the task may still be running there`,
        action: `Wait for ${w}: if it comes back listing the task, the task resumes and its cards follow by themselves. Only if ${w} will not come back: check the host, then gpu-broker reconcile ${task} --resolution FAILED --reason "…" (a task still running there is killed if the worker returns).`,
      };
    }
    case 'running':
      return {
        status: `worker ${w} is online and still runs the task on these cards`,
        action: `Do not reconcile: that would kill a live task. Its own reports settle it; to stop it, cancel_task (or gpu-broker reconcile ${task} --force …, which kills it).`,
      };
    case 'not_running':
      return null;
  }
}

/** Cards held by quarantined leases. */
function quarantinedLeaseAlerts(c: StatusContext): StatusAlert[] {
  const { leases, taskRef } = c;
  return leases
    .filter((l) => l.state === 'QUARANTINED')
    .map((l) => {
      const advice = whereaboutsAdvice(c, l);
      const held = `cards held by quarantined lease ${l.id} (task ${taskRef(l.task_id)}): ${l.reason ?? 'cleanup not confirmed'}`;
      return {
        kind: 'card_quarantined',
        severity: 'critical',
        subject: `${l.worker_id}:${l.cards.map((x) => x.index).join(',')}`,
        message: advice === null ? held : `${held}; ${advice.status}`,
        action:
          advice?.action ??
          `Check the cards on ${l.worker_id}, then gpu-broker reconcile ${taskRef(l.task_id)} --resolution FAILED --reason "…"`,
      };
    });
}

/**
 * Cards a live lease holds that its online worker's samples no longer list: a MIG layout changed under a
 * running task (a slice gone), or a card fell off the bus. The worker stops such a run after two samples
 * without the card and reports it CARD_LOST (a Slurm job is left to Slurm); where its cleanup receipt
 * checks cards it cannot confirm a card that is gone, so the lease ends QUARANTINED — this says so in
 * between (docs/operations.md "Alerts", docs/decisions/0046-mig-slices-as-cards.md §7).
 */
function leasedCardMissingAlerts({ deps, now, leases, taskRef }: StatusContext): StatusAlert[] {
  const alerts: StatusAlert[] = [];
  for (const l of leases) {
    if (l.state !== 'ACTIVE' && l.state !== 'RELEASING') continue;
    if (!deps.cluster.fleet.isOnline(l.worker_id, now)) continue;
    const live = deps.cluster.fleet.get(l.worker_id);
    // A worker that cannot sample, or has not yet, lists nothing: that is sampler_error's, not this.
    if (live.sampler_error || live.cards.length === 0) continue;
    const sampled = new Set(live.cards.map((c) => c.index));
    const missing = l.cards.filter((c) => !sampled.has(c.index)).map((c) => c.index);
    if (missing.length === 0) continue;
    alerts.push({
      kind: 'leased_card_missing',
      severity: 'critical',
      subject: `${l.worker_id}:${missing.join(',')}`,
      message: `card(s) ${missing.join(', ')} held by lease ${l.id} (task ${taskRef(l.task_id)}) are no longer in worker ${l.worker_id}'s samples: a MIG layout changed under a running task, or the card is gone from the host`,
      action:
        'Change a MIG layout only on a drained worker (gpu-broker drain). The worker stops the task and it ends FAILED (CARD_LOST); its cleanup cannot confirm a card that is gone, so on a real card the lease is then QUARANTINED: check the host, then reconcile it.',
    });
  }
  return alerts;
}

/** Workers offline, else workers whose sampler fails. */
function workerHealthAlerts({ deps, now }: StatusContext): StatusAlert[] {
  const alerts: StatusAlert[] = [];
  for (const w of deps.store.workers.list()) {
    const live = deps.cluster.fleet.get(w.id);
    const offlineSince = deps.cluster.fleet.offlineSince(w.id, now);
    if (!deps.cluster.fleet.isOnline(w.id, now))
      alerts.push({
        kind: 'worker_offline',
        severity: 'warning',
        subject: w.id,
        message: `worker ${w.id} is offline${offlineSince !== null ? ` since ${new Date(offlineSince).toISOString()}` : ''}`,
        action:
          'Check the worker process and its network; its running tasks keep running there. After lease_grace_seconds they show RECONCILIATION_REQUIRED; if the worker comes back listing them they resume by themselves.',
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
  return alerts;
}

/**
 * Workers without a sandbox. Loud on purpose: such a worker lets a task see the whole host. Critical
 * when the policy lets tasks run there anyway; a warning when require_isolation keeps tasks off it.
 */
function unisolatedWorkerAlerts({ deps }: StatusContext): StatusAlert[] {
  const requireIsolation = deps.config.policy.require_isolation;
  return deps.store.workers
    .list()
    .filter((w) => w.isolation === 'none')
    .map((w) => ({
      kind: 'worker_unisolated',
      severity: requireIsolation ? 'warning' : 'critical',
      subject: w.id,
      message: requireIsolation
        ? `worker ${w.id} is UNISOLATED (no task sandbox); policy.require_isolation keeps every task off it`
        : `worker ${w.id} is UNISOLATED: its tasks run without a sandbox and can see the whole host`,
      action:
        'Restart the worker with bubblewrap isolation (gpu-broker worker --isolation bwrap, the default where bwrap is installed).',
    }));
}

/** Grants the scheduler keeps failing to apply. */
function failingGrantAlerts({ deps, taskRef }: StatusContext): StatusAlert[] {
  return deps.cluster.failingGrants().map((f) => ({
    kind: 'grant_failing',
    severity: 'critical',
    subject: taskRef(f.task_id),
    message: `granting cards to task ${taskRef(f.task_id)} failed ${f.failures} times in a row: ${f.error}`,
    action: `The scheduler retries at ${new Date(f.retry_at).toISOString()} with a growing delay; check the worker's card list (duplicate indexes or uuids) and the master log.`,
  }));
}

/** Tasks whose worker was lost, waiting for their worker or an operator's verdict. */
function reconciliationAlerts(c: StatusContext): StatusAlert[] {
  const { deps, taskRef } = c;
  return deps.store.tasks.inState('RECONCILIATION_REQUIRED').map((t) => {
    const lease = deps.store.leases.latestLeaseForTask(t.id);
    const advice = lease === undefined ? null : whereaboutsAdvice(c, lease);
    return {
      kind: 'task_needs_reconciliation',
      severity: 'critical',
      subject: taskRef(t.id),
      message: `task ${taskRef(t.id)} lost its worker; its outcome is unknown${advice === null ? '' : `: ${advice.status}`}`,
      action:
        advice?.action ??
        `The worker cannot account for it: check the host, then gpu-broker reconcile ${taskRef(t.id)} --resolution FAILED --reason "…"`,
    };
  });
}

/** The master's disk, low or full. */
function storageAlerts({ deps }: StatusContext): StatusAlert[] {
  const storage = deps.storage?.status();
  if (!storage || storage.state === 'ok') return [];
  return [
    {
      kind: storage.state === 'low' ? 'disk_low' : 'disk_full',
      severity: storage.state === 'low' ? 'warning' : 'critical',
      subject: 'data_dir',
      message:
        storage.state === 'low'
          ? `the master's disk is getting full: ${storage.detail ?? 'low on space'}`
          : `the master refuses new work, logs and outputs (UNAVAILABLE): ${storage.detail ?? 'out of space'}`,
      action:
        'Free space on the data dir filesystem (old task logs and outputs go with storage.retention; the worker outboxes keep what was refused and resend it); /healthz answers 503 until the store takes writes again.',
    },
  ];
}

/** The audit chain, once it no longer verifies. */
function auditAlerts({ deps }: StatusContext): StatusAlert[] {
  const audit = deps.auditStatus();
  if (audit.ok) return [];
  return [
    {
      kind: 'audit_chain_broken',
      severity: 'critical',
      subject: 'audit_events',
      message: audit.detail ?? 'audit chain broken',
      action: 'Run gpu-broker audit verify and investigate the named row.',
    },
  ];
}

/** Live standing grants at 80 % of a budget or of their lifetime, or suspended by their breaker. */
function standingGrantAlerts({ deps, now, mayReadGrant }: StatusContext): StatusAlert[] {
  return deps.store.grants.live().flatMap((g): StatusAlert[] => {
    if (!mayReadGrant(g.grantee_id)) return [];
    const high = Object.entries(grantUsage(g, now)).filter(([, r]) => r >= GRANT_ALERT_RATIO);
    if (g.state !== 'SUSPENDED' && high.length === 0) return [];
    return [
      {
        kind: 'standing_grant_budget',
        severity: 'warning',
        subject: g.id,
        message:
          g.state === 'SUSPENDED'
            ? `standing grant ${g.id} is SUSPENDED after ${g.consecutive_failures} failed runs in a row`
            : `standing grant ${g.id} has used ${high.map(([k, r]) => `${Math.round(r * 100)} % of its ${k}`).join(', ')}`,
        action: 'get_grant shows its runs; a new grant (request_grant with supersedes) needs a reviewer.',
      },
    ];
  });
}

/** The alert sources, in the order get_status lists their alerts. */
const ALERT_SOURCES: ReadonlyArray<(c: StatusContext) => StatusAlert[]> = [
  quarantinedLeaseAlerts,
  leasedCardMissingAlerts,
  workerHealthAlerts,
  unisolatedWorkerAlerts,
  failingGrantAlerts,
  standingGrantAlerts,
  reconciliationAlerts,
  storageAlerts,
  auditAlerts,
];

/** The cluster's health at a glance: live leases, task counts and the alerts an operator acts on. */
export function getStatus(deps: BrokerDeps, principal: Principal) {
  const readAll = canReadAll(principal);
  // Task ids are shown only to those who may read the task (the owner, reviewers, operators).
  const mayRead = (taskId: string) => readAll || deps.store.tasks.get(taskId)?.owner_id === principal.id;
  const context: StatusContext = {
    deps,
    now: deps.clock.now(),
    leases: deps.store.leases.liveLeases(),
    taskRef: (taskId) => (mayRead(taskId) ? taskId : 'TASK'),
    mayReadGrant: (granteeId) => readAll || granteeId === principal.id,
  };
  const alerts = ALERT_SOURCES.flatMap((source) => source(context));
  // Every account for operators and viewers; everyone sees their own (`you`).
  // The queue without its specs (10,000 queued: a fraction of parsing each), read once for both.
  const queued = deps.store.tasks.queuedForScheduling();
  const standings = accountStandings(
    deps,
    context.now,
    (ownerId) => readAll || ownerId === principal.id,
    queued,
  );
  return {
    tasks_by_state: deps.store.tasks.countByState(),
    leases: context.leases.map((l) => ({
      lease_id: l.id,
      task_id: mayRead(l.task_id) ? l.task_id : null,
      worker_id: l.worker_id,
      cards: l.cards.map((c) => c.index),
      lease_epoch: l.lease_epoch,
      state: l.state,
      reason: l.reason,
    })),
    alerts,
    you: whereYouStand(deps, principal, standings, queued),
    // As get_usage: operators and viewers see every account (a viewer without the task ids).
    ...(principal.roles.includes('operator') || principal.roles.includes('viewer')
      ? { accounts: standings }
      : {}),
  };
}

/**
 * The caller's account and where it stands (get_status `you`): its share, the cards it holds, its
 * card-hours this period and budget left, the caller's own cards and first queued task, and all of it
 * in words. Other accounts appear only by name and cards held against share, when over it.
 */
function whereYouStand(
  deps: BrokerDeps,
  principal: Principal,
  standings: readonly AccountStanding[],
  queuedTasks: readonly QueuedTaskRow[],
) {
  const account = principal.account;
  const mine =
    standings.find((a) => a.account === account) ??
    // A principal whose account is gone (it cannot be deleted while it has principals): nothing known.
    ({
      account,
      parent: null,
      share: 0,
      share_cards: 0,
      held_cards: 0,
      nominal_cards: null,
      limit_cards: null,
      period: '7d',
      period_start: '',
      usage_card_hours: 0,
      budget_card_hours: null,
      budget_left_card_hours: null,
      budget_resets_at: null,
      queued: 0,
      first_wait: null,
      model_quotas: [],
    } satisfies AccountStanding);
  let yourCards = 0;
  for (const c of deps.store.leases.liveCards())
    if (c.state !== 'QUARANTINED' && c.owner_id === principal.id) yourCards++;
  // The account's own principals' queued tasks in queue order: the caller's first one's place among them.
  const members = new Set(
    deps.store.principals
      .list()
      .filter((p) => p.account === account)
      .map((p) => p.id),
  );
  const queue = queuedTasks
    .filter((t) => members.has(t.owner_id))
    .map((t) => ({ t, position: deps.observe.queueInfo(t.id)?.position ?? Number.MAX_SAFE_INTEGER }))
    .sort((a, b) => a.position - b.position || a.t.approved_at - b.t.approved_at);
  const at = queue.findIndex((q) => q.t.owner_id === principal.id);
  const first = at < 0 ? null : queue[at]!;
  const firstReason = first === null ? undefined : deps.observe.queueInfo(first.t.id)?.reason;
  const firstQueued =
    first === null
      ? null
      : {
          task_id: first.t.id,
          position_in_account: first.position === Number.MAX_SAFE_INTEGER ? null : at + 1,
          code: typeof firstReason?.['code'] === 'string' ? firstReason['code'] : 'queued',
          message:
            typeof firstReason?.['message'] === 'string'
              ? firstReason['message']
              : 'not yet looked at by the scheduler',
        };
  return {
    principal: principal.name,
    account,
    share: mine.share,
    share_cards: mine.share_cards,
    held_cards: mine.held_cards,
    card_hours_7d: card7d(deps, account),
    your_cards: yourCards,
    nominal_cards: mine.nominal_cards,
    limit_cards: mine.limit_cards,
    period: mine.period,
    usage_card_hours: mine.usage_card_hours,
    budget_left_card_hours: mine.budget_left_card_hours,
    budget_resets_at: mine.budget_resets_at,
    model_quotas: mine.model_quotas,
    queued: mine.queued,
    your_first_queued: firstQueued,
    words: standingWords(mine, standings, { held_cards: yourCards, first_queued: firstQueued }),
  };
}

/** The card-hours charged to `account` (its own ledger rows) over the last 7 days. */
function card7d(deps: BrokerDeps, account: string): number {
  const now = deps.clock.now();
  const used = deps.store.usage.summary({
    by: 'account',
    since: now - 7 * 86_400_000,
    until: now + 1,
    accounts: [account],
  });
  return Math.round((used.reduce((n, l) => n + l.card_seconds, 0) / 3600) * 1000) / 1000;
}
