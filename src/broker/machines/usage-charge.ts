import { type ChargedCard, usageRows } from '../../domain/accounts/usage.js';
import type { LeaseRecord } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';

/**
 * Charges a lease to its task's principal and account (docs/operations.md "Accounts and usage"): called
 * by moveLease when the lease is RELEASED, in the move's transaction, with the moment its cards stopped
 * being its task's (the release, or, for a lease released from QUARANTINED after its worker was lost,
 * the quarantine; a quarantined lease whose worker returns goes back to ACTIVE and is not charged then).
 * The ledger's key (lease, model, simulated) makes a second call for the same lease write nothing, so a
 * lease is charged exactly once, for the time from its grant to that moment. The account is the
 * principal's at that moment; a grant-approved run also names its grant (the grant's own card-hours are
 * spent by settleGrantRun).
 */
export function chargeLease(deps: Pick<BrokerDeps, 'store'>, lease: LeaseRecord, endedAt: number): void {
  const { store } = deps;
  if (store.usage.isCharged(lease.id)) return;
  const task = store.tasks.get(lease.task_id);
  if (!task || lease.cards.length === 0) return;
  const owner = store.principals.findById(task.owner_id);
  const known = new Map((store.workers.get(lease.worker_id)?.cards ?? []).map((c) => [c.uuid, c]));
  const cards: ChargedCard[] = lease.cards.map((c) => {
    const k = known.get(c.uuid);
    // A MIG slice is its own line of the ledger (its profile beside the model) and k/7 of a card.
    if (k?.mig !== undefined)
      return {
        model: `${k.model} MIG ${k.mig.profile}`,
        simulated: k.simulated,
        mig_slices: k.mig.compute_slices,
      };
    return { model: k?.model ?? 'unknown', simulated: k?.simulated ?? false };
  });
  const grantId = store.grants.runOfTask(task.id)?.grant_id ?? null;
  store.usage.charge(
    usageRows(cards, lease.created_at, endedAt).map((r) => ({
      ...r,
      lease_id: lease.id,
      task_id: task.id,
      principal_id: task.owner_id,
      account: owner?.account ?? 'default',
      grant_id: grantId,
    })),
  );
}
