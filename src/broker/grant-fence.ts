import type { GrantRecord } from '../store/grants-repo.js';
import type { TaskRecord } from '../store/tasks-repo.js';
import type { BrokerDeps } from './deps.js';
import { moveTask } from './machines/task.js';

/**
 * Runs a standing grant approved start only while the grant still allows them (ADR 0029): a
 * grant revoked, suspended or past `expires_at` between the auto-approval and the lease starts none of
 * its queued tasks. The scheduler asks {@link cancelIfGrantLapsed} in the transaction that would grant
 * the lease (so no revoke can slip between the check and the lease); revoke_grant and the sweeper cancel
 * the queued ones at once, so they neither wait for cards nor hold the owner's queue quota.
 */

/** Why grant `g` no longer lets its runs start at `now`, or null while it does. */
export function grantLapse(g: GrantRecord | undefined, now: number): string | null {
  if (g === undefined) return 'its approving grant is gone';
  if (g.state !== 'ACTIVE') return `its approving grant ${g.id} is ${g.state}`;
  if (now >= g.expires_at)
    return `its approving grant ${g.id} expired at ${new Date(g.expires_at).toISOString()}`;
  return null;
}

/**
 * Cancels QUEUED task `t` when a standing grant approved it and that grant lapsed: audited
 * (`task.cancel_queued` with the grant, its state and why) and with the reason on the task
 * (`grant_not_active`). True when it cancelled; false for a task no grant approved or whose grant holds.
 * Call inside the transaction that would otherwise start it.
 */
export function cancelIfGrantLapsed(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>,
  t: TaskRecord,
  actor: string,
): boolean {
  if (t.state !== 'QUEUED') return false;
  const run = deps.store.grants.runOfTask(t.id);
  if (run === undefined) return false;
  const g = deps.store.grants.get(run.grant_id);
  const why = grantLapse(g, deps.clock.now());
  if (why === null) return false;
  moveTask(
    deps,
    t,
    'cancel_queued',
    actor,
    {
      desired: 'cancel',
      failure_reason: 'CANCELLED',
      reason: { code: 'grant_not_active', message: `not started: ${why}` },
    },
    {
      grant_id: run.grant_id,
      grant_state: g?.state ?? null,
      expires_at: g ? new Date(g.expires_at).toISOString() : null,
      reason: `not started: ${why}`,
    },
  );
  return true;
}

/** Cancels every QUEUED task grant `g` approved, once it lapsed; returns their ids. */
export function cancelQueuedRunsOf(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>,
  g: GrantRecord,
  actor: string,
): string[] {
  const cancelled: string[] = [];
  for (const run of deps.store.grants.openRuns(g.id)) {
    const t = deps.store.tasks.get(run.task_id);
    if (t && cancelIfGrantLapsed(deps, t, actor)) cancelled.push(t.id);
  }
  return cancelled;
}
