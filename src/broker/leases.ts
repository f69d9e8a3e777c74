import { BrokerError } from '../contracts/errors.js';
import { type LeaseEvent, transitionLease } from '../domain/lease.js';
import type { LeaseRecord } from '../store/leases-repo.js';
import type { BrokerDeps } from './deps.js';

/** Topic notified when cards may have become free (scheduler, dashboard). */
export const CARDS_TOPIC = 'cards';

/**
 * Applies a lease event with compare-and-set and an audit row. The only place a lease's state is
 * assigned; a lease reaches RELEASED (and frees its cards) only through `cleaned` or `reconcile_release`.
 */
export function moveLease(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>,
  lease: LeaseRecord,
  event: LeaseEvent,
  actor: string,
  reason: string | null = null,
): LeaseRecord {
  const t = transitionLease(lease.state, event);
  if (!t.ok)
    throw new BrokerError(
      'INVALID_STATE',
      `lease ${lease.id} is ${lease.state}; "${event}" is not allowed there`,
      t.allowed.length ? `From ${lease.state}: ${t.allowed.join(', ')}.` : `${lease.state} is final.`,
    );
  const now = deps.clock.now();
  const next: LeaseRecord = {
    ...lease,
    state: t.to,
    reason: reason ?? lease.reason,
    updated_at: now,
    released_at: t.to === 'RELEASED' ? now : null,
  };
  if (!deps.store.leases.updateLease(next, lease.state))
    throw new BrokerError('CONFLICT', `lease ${lease.id} changed concurrently`, 'Retry.');
  deps.store.audit.append({
    at: now,
    actor,
    action: `lease.${event}`,
    subject_type: 'lease',
    subject_id: lease.id,
    data: {
      from: lease.state,
      to: t.to,
      task_id: lease.task_id,
      worker_id: lease.worker_id,
      lease_epoch: lease.lease_epoch,
      cards: lease.cards.map((c) => c.index),
      reason,
    },
  });
  deps.store.afterCommit(() => deps.notifier.notify(CARDS_TOPIC));
  return next;
}
