import { BrokerError } from '../../contracts/errors.js';
import {
  chargeOf,
  crossedAlerts,
  GRANT_TABLE,
  type GrantEvent,
  grantUsage,
} from '../../domain/grants/grant.js';
import type { GrantRecord } from '../../store/grants-repo.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { GRANTS_TOPIC, grantTopic } from '../topics.js';
import { applyMove } from './apply-move.js';

/**
 * How a standing grant's row changes (src/domain/grants/grant.ts): its state by the table, its
 * counters by compare-and-set on the values read, both inside the caller's transaction. Also the
 * settlement of a run when its task ends (called from moveTask, so no terminal task is ever missed).
 */

type Deps = Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>;

/** Fields a move may set besides the state. */
export type GrantChanges = Partial<
  Pick<GrantRecord, 'decided_by' | 'decision_comment' | 'decided_at' | 'consecutive_failures'>
>;

/** Applies a grant event with compare-and-set, appends the audit row, notifies after commit. */
export function moveGrant(
  deps: Deps,
  g: GrantRecord,
  event: GrantEvent,
  actor: string,
  changes: GrantChanges = {},
  data: Record<string, unknown> = {},
): GrantRecord {
  return applyMove(deps, {
    kind: 'standing_grant',
    table: GRANT_TABLE,
    record: g,
    event,
    actor,
    next: (to, now) => ({ ...g, ...changes, state: to, updated_at: now }),
    save: (next) => deps.store.grants.update(next, g),
    data,
    topics: [grantTopic(g.id), GRANTS_TOPIC],
  });
}

/** Counter fields a charge or settlement changes. */
export type GrantCounters = Pick<
  GrantRecord,
  'runs_used' | 'card_seconds_charged' | 'card_seconds_reserved' | 'running' | 'consecutive_failures'
>;

/**
 * Writes new counters with compare-and-set on the ones read (CONFLICT if another writer was first;
 * the database's CHECKs refuse any overspend as a last line), then raises the 80 % alerts it crossed.
 */
export function updateGrantCounters(
  deps: Deps,
  g: GrantRecord,
  counters: Partial<GrantCounters>,
): GrantRecord {
  const now = deps.clock.now();
  const next: GrantRecord = { ...g, ...counters, updated_at: now };
  const before = grantUsage(g, now);
  const after = grantUsage(next, now);
  const crossed = crossedAlerts(before, after).filter((k) => !g.alerted.includes(k));
  next.alerted = [...g.alerted, ...crossed];
  if (!deps.store.grants.update(next, g))
    throw new BrokerError('CONFLICT', `standing grant ${g.id} changed concurrently`, 'Retry the call.');
  for (const budget of crossed) appendAlert(deps, next, budget, after, now);
  deps.store.afterCommit(() => {
    deps.notifier.notify(grantTopic(g.id));
    deps.notifier.notify(GRANTS_TOPIC);
  });
  return next;
}

/** The audit row of an 80 % alert (the audit monitor and the dashboard read audit rows). */
export function appendAlert(
  deps: Deps,
  g: GrantRecord,
  budget: string,
  usage: Record<string, number>,
  now: number,
): void {
  deps.store.audit.append({
    at: now,
    actor: 'system',
    action: 'standing_grant.budget_alert',
    subject_type: 'standing_grant',
    subject_id: g.id,
    data: { budget, ratio: usage[budget], grantee_id: g.grantee_id },
  });
}

const OUTCOME = { COMPLETED: 'COMPLETED', FAILED: 'FAILED', CANCELLED: 'CANCELLED' } as const;

/**
 * Settles the grant run of a task that just ended: charges cards × the seconds it held them (capped at
 * its reservation, src/domain/grants/grant.ts chargeOf; a preempted task's earlier runs included), releases the reservation and its
 * concurrency slot, and counts failures in a row; `breaker_k` of them suspend an ACTIVE grant. A task
 * no grant approved, or one settled already, changes nothing.
 */
export function settleGrantRun(deps: Deps, task: TaskRecord): void {
  const outcome = OUTCOME[task.state as keyof typeof OUTCOME];
  if (outcome === undefined || task.finished_at === null) return;
  const run = deps.store.grants.runOfTask(task.id);
  if (!run || run.settled_at !== null) return;
  const g = deps.store.grants.get(run.grant_id);
  if (!g) return;
  // A preempted run's cards count too (docs/operations.md "Borrowing and reclaim"): task.started_at is
  // the last run's only (a requeue clears it), so the earlier runs' leases are read from the ledger.
  const lastLease =
    task.started_at === null ? null : (deps.store.leases.latestLeaseForTask(task.id)?.id ?? null);
  const preempted = deps.store.preemptions.preemptedCardSeconds(task.id, lastLease);
  const charged = Math.min(
    run.card_seconds_reserved,
    chargeOf(run.cards, task.started_at, task.finished_at, run.card_seconds_reserved) + preempted,
  );
  deps.store.grants.settleRun(task.id, charged, outcome, task.finished_at);
  const failures =
    outcome === 'FAILED' ? g.consecutive_failures + 1 : outcome === 'COMPLETED' ? 0 : g.consecutive_failures;
  const next = updateGrantCounters(deps, g, {
    card_seconds_charged: g.card_seconds_charged + charged,
    card_seconds_reserved: g.card_seconds_reserved - run.card_seconds_reserved,
    running: g.running - 1,
    consecutive_failures: failures,
  });
  deps.store.audit.append({
    at: deps.clock.now(),
    actor: 'system',
    action: 'standing_grant.run_settled',
    subject_type: 'standing_grant',
    subject_id: g.id,
    data: { task_id: task.id, outcome, card_seconds_charged: charged, reserved: run.card_seconds_reserved },
  });
  if (next.state === 'ACTIVE' && failures >= next.breaker_k)
    moveGrant(deps, next, 'suspend', 'system', {}, { reason: `${failures} failed runs in a row` });
}
