import { quotaSlot, sumPerQuota } from '../../domain/accounts/model-quotas.js';
import { budgetPeriod } from '../../domain/accounts/tree.js';
import type { FairShareView, WorkerView } from '../../domain/scheduling/types.js';
import type { AccountRecord, ModelQuotaRecord } from '../../store/accounts-repo.js';
import type { LiveLeaseCard } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';

/**
 * What a scheduling pass reads of the quotas per card model (docs/operations.md "Accounts and usage",
 * ADR 0048), only where some account has one (scheduler.ts calls this then): each account's model
 * quotas, the cards its own principals hold by model (the model the card's worker reports; a card of a
 * worker the pass does not know counts against no model quota), and each model budget's use this period
 * by the quota's account and every account below it: the ledger's leases of the model that ended in it
 * and the live leases' time on cards of the model in it so far (a quarantined one up to its quarantine),
 * as the account-wide budget counts (scheduler.ts `budgetsUsed`).
 */
export function addModelQuotas(
  deps: Pick<BrokerDeps, 'store'>,
  accounts: FairShareView['accounts'],
  facts: {
    now: number;
    list: readonly AccountRecord[];
    quotas: readonly ModelQuotaRecord[];
    live: readonly LiveLeaseCard[];
    workers: readonly WorkerView[];
    accountOf: (owner: string) => string;
  },
): void {
  const { now, list, quotas, live, workers, accountOf } = facts;
  const modelOf = new Map<string, string>();
  for (const w of workers) for (const c of w.cards) modelOf.set(`${w.worker_id}/${c.index}`, c.model);
  for (const c of live) {
    const model = modelOf.get(`${c.worker_id}/${c.card_index}`);
    const a = accounts[accountOf(c.owner_id)];
    if (model === undefined || a === undefined || c.state === 'QUARANTINED') continue;
    const running = { ...(a.running_by_model ?? {}) };
    running[model] = (running[model] ?? 0) + 1;
    a.running_by_model = running;
  }
  const used = budgetsUsed(deps, now, list, quotas, live, modelOf, accountOf);
  const byAccount = new Map<
    string,
    NonNullable<FairShareView['accounts'][string]['model_quotas']>[number][]
  >();
  for (const q of quotas) {
    const budget =
      q.budget_card_hours === null || q.budget_period === null
        ? null
        : {
            limit_card_seconds: q.budget_card_hours * 3600,
            used_card_seconds: used.get(quotaSlot(q.account, q.model_key)) ?? 0,
            resets_at: budgetPeriod(q.budget_period, now).end,
          };
    const view = {
      model: q.model,
      words: ` ${q.model_key} `,
      nominal_cards: q.nominal_cards,
      borrowing_limit: q.borrowing_limit,
      budget,
    };
    byAccount.set(q.account, [...(byAccount.get(q.account) ?? []), view]);
  }
  for (const [name, views] of byAccount) {
    const a = accounts[name];
    if (a) a.model_quotas = views;
  }
}

/** Each model budget's card-seconds this period, by `quotaSlot`. */
function budgetsUsed(
  deps: Pick<BrokerDeps, 'store'>,
  now: number,
  list: readonly AccountRecord[],
  quotas: readonly ModelQuotaRecord[],
  live: readonly LiveLeaseCard[],
  modelOf: ReadonlyMap<string, string>,
  accountOf: (owner: string) => string,
): Map<string, number> {
  const out = new Map<string, number>();
  const budgeted = quotas.filter((q) => q.budget_period !== null && q.budget_card_hours !== null);
  if (budgeted.length === 0) return out;
  const { store } = deps;
  const parentOf = new Map(list.map((a) => [a.name, a.parent]));
  const leases = new Map(store.leases.liveLeases().map((l) => [l.id, l]));
  for (const period of ['day', 'week', 'month'] as const) {
    const these = budgeted.filter((q) => q.budget_period === period);
    if (these.length === 0) continue;
    const { start } = budgetPeriod(period, now);
    const rows = store.usage
      .byAccountModel(start, now + 1)
      .map((r) => ({ account: r.account, model: r.model, amount: r.card_seconds }));
    for (const c of live) {
      const l = leases.get(c.lease_id);
      const model = modelOf.get(`${c.worker_id}/${c.card_index}`);
      if (l === undefined || model === undefined) continue;
      const end = l.state === 'QUARANTINED' ? l.updated_at : now;
      const seconds = Math.max(0, end - Math.max(start, l.created_at)) / 1000;
      rows.push({ account: accountOf(c.owner_id), model, amount: seconds });
    }
    for (const [slot, seconds] of sumPerQuota(these, parentOf, rows)) out.set(slot, seconds);
  }
  return out;
}
