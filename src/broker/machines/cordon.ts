import type { BrokerDeps } from '../deps.js';

/**
 * A card's cordon: kept out of scheduling by an operator or a qualification run, with a reason. Not a
 * table-driven machine (a card is cordoned or not; cordoning it again replaces the reason), but like the
 * machines it is written with its audit row in the same transaction, here and nowhere else. Callers
 * notify (CARDS_TOPIC, a scheduler pass) as their use case needs.
 */

/** One card of one worker, and who changes its cordon when. */
export interface CordonChange {
  worker_id: string;
  index: number;
  actor: string;
  at: number;
  /** The audit row's data (the caller's: a run id, the operator's own reason or null). */
  audit: Record<string, unknown>;
}

/** Cordons the card (or replaces its reason) and audits `card.cordoned`. Call inside a transaction. */
export function cordonCard(deps: Pick<BrokerDeps, 'store'>, c: CordonChange & { reason: string }): void {
  deps.store.workers.cordon({
    worker_id: c.worker_id,
    card_index: c.index,
    reason: c.reason,
    actor: c.actor,
    created_at: c.at,
  });
  auditCordon(deps, c, 'card.cordoned');
}

/** Lifts the card's cordon (if any) and audits `card.uncordoned`. Call inside a transaction. */
export function uncordonCard(deps: Pick<BrokerDeps, 'store'>, c: CordonChange): void {
  deps.store.workers.uncordon(c.worker_id, c.index);
  auditCordon(deps, c, 'card.uncordoned');
}

function auditCordon(
  deps: Pick<BrokerDeps, 'store'>,
  c: CordonChange,
  action: 'card.cordoned' | 'card.uncordoned',
): void {
  deps.store.audit.append({
    at: c.at,
    actor: c.actor,
    action,
    subject_type: 'card',
    subject_id: `${c.worker_id}/${c.index}`,
    data: c.audit,
  });
}
