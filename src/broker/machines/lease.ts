import { LEASE_TABLE, type LeaseEvent } from '../../domain/machines/lease.js';
import type { LeaseRecord } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';
import { CARDS_TOPIC } from '../topics.js';
import { applyMove } from './apply-move.js';
import { chargeLease } from './usage-charge.js';

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
  const next = applyMove(deps, {
    kind: 'lease',
    table: LEASE_TABLE,
    record: lease,
    event,
    actor,
    next: (to, now) => ({
      ...lease,
      state: to,
      reason: reason ?? lease.reason,
      updated_at: now,
      released_at: to === 'RELEASED' ? now : null,
    }),
    save: (next, expected) => deps.store.leases.updateLease(next, expected),
    data: {
      task_id: lease.task_id,
      worker_id: lease.worker_id,
      lease_epoch: lease.lease_epoch,
      cards: lease.cards.map((c) => c.index),
      reason,
    },
    // Cards may be used again only once the lease is released, and a quarantined lease's cards stop
    // counting against its owner's quota: those moves wake the scheduler (and the dashboard). RELEASING
    // changes neither (the task's own topic tells a watcher that its execution ended).
    topics: (to) => (to === 'RELEASED' || to === 'QUARANTINED' ? [CARDS_TOPIC] : []),
  });
  // The cards are free again: the lease is charged to its account, once (usage-charge.ts), up to when
  // they stopped being the task's (a lease released from quarantine: when it was quarantined).
  if (next.state === 'RELEASED')
    chargeLease(deps, next, lease.state === 'QUARANTINED' ? lease.updated_at : next.updated_at);
  return next;
}
