import { quotaSlot, sumPerQuota } from '../../domain/accounts/model-quotas.js';
import { budgetPeriod } from '../../domain/accounts/tree.js';
import type { AccountRecord, ModelQuotaRecord } from '../../store/accounts-repo.js';
import type { LeaseRecord, LiveLeaseCard } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';
import { iso } from './views.js';

/**
 * Where each account stands against its quotas per card model (docs/operations.md "Accounts and usage",
 * ADR 0048), for get_status (`you.model_quotas`, `accounts[].model_quotas`) and `gpu-broker status`: the
 * cards of the model its subtree holds now and what it may hold, its card-hours of the model this period
 * (its budget's UTC day, week or month, else the last 7 days) and budget left. Counted as the scheduler
 * counts them (src/broker/loops/model-quota-facts.ts): a card's model is what its worker reported.
 */
export interface ModelStanding extends QuotaStanding {
  model: string;
}

/** Where a quota stands (an account's, account-standing.ts, or one of its model quotas). */
export interface QuotaStanding {
  /** Cards its subtree's principals hold now (quarantined leases left out). */
  held_cards: number;
  nominal_cards: number | null;
  /** nominal + borrowing limit: the most its subtree may hold; null: no limit. */
  limit_cards: number | null;
  /** 'day' | 'week' | 'month' (its budget's) or '7d'. */
  period: 'day' | 'week' | 'month' | '7d';
  period_start: string;
  usage_card_hours: number;
  budget_card_hours: number | null;
  budget_left_card_hours: number | null;
  /** When the budget's period ends; null without a budget. */
  budget_resets_at: string | null;
}

const WEEK_MS = 7 * 86_400_000;
const hours = (seconds: number) => Math.round((seconds / 3600) * 1000) / 1000;

/** Each account's model standings at `now`, by account (accounts without a model quota: absent). */
export function modelStandings(
  deps: Pick<BrokerDeps, 'store'>,
  now: number,
  list: readonly AccountRecord[],
  quotas: readonly ModelQuotaRecord[],
  live: { cards: readonly LiveLeaseCard[]; leases: ReadonlyMap<string, LeaseRecord> },
  accountOf: (ownerId: string) => string | undefined,
): Map<string, ModelStanding[]> {
  const out = new Map<string, ModelStanding[]>();
  if (quotas.length === 0) return out;
  const { store } = deps;
  const parentOf = new Map(list.map((a) => [a.name, a.parent]));
  const modelOf = new Map<string, string>();
  for (const w of store.workers.list()) for (const c of w.cards) modelOf.set(`${w.id}/${c.index}`, c.model);
  const cards = live.cards.flatMap((c) => {
    const model = modelOf.get(`${c.worker_id}/${c.card_index}`);
    const account = accountOf(c.owner_id);
    return model === undefined || account === undefined ? [] : [{ c, model, account }];
  });
  const held = sumPerQuota(
    quotas,
    parentOf,
    cards.filter((x) => x.c.state !== 'QUARANTINED').map((x) => ({ ...x, amount: 1 })),
  );
  const startOf = (q: ModelQuotaRecord) =>
    q.budget_period !== null && q.budget_card_hours !== null
      ? budgetPeriod(q.budget_period, now).start
      : now - WEEK_MS;
  // Card-seconds of each quota's model since its period's start: the ledger's and the live leases' so far.
  const used = new Map<string, number>();
  for (const start of new Set(quotas.map(startOf))) {
    const rows = store.usage
      .byAccountModel(start, now + 1)
      .map((r) => ({ account: r.account, model: r.model, amount: r.card_seconds }));
    for (const { c, model, account } of cards) {
      const l = live.leases.get(c.lease_id);
      if (l === undefined) continue;
      const end = l.state === 'QUARANTINED' ? l.updated_at : now;
      rows.push({ account, model, amount: Math.max(0, end - Math.max(start, l.created_at)) / 1000 });
    }
    const these = quotas.filter((q) => startOf(q) === start);
    for (const [slot, seconds] of sumPerQuota(these, parentOf, rows)) used.set(slot, seconds);
  }
  for (const q of quotas) {
    const slot = quotaSlot(q.account, q.model_key);
    const budgeted = q.budget_period !== null && q.budget_card_hours !== null;
    const seconds = used.get(slot) ?? 0;
    const standing: ModelStanding = {
      model: q.model,
      held_cards: held.get(slot) ?? 0,
      nominal_cards: q.nominal_cards,
      limit_cards:
        q.nominal_cards !== null && q.borrowing_limit !== null ? q.nominal_cards + q.borrowing_limit : null,
      period: budgeted ? q.budget_period! : '7d',
      period_start: iso(startOf(q)),
      usage_card_hours: hours(seconds),
      budget_card_hours: budgeted ? q.budget_card_hours : null,
      budget_left_card_hours: budgeted ? Math.max(0, hours(q.budget_card_hours! * 3600 - seconds)) : null,
      budget_resets_at: budgeted ? iso(budgetPeriod(q.budget_period!, now).end) : null,
    };
    out.set(q.account, [...(out.get(q.account) ?? []), standing]);
  }
  return out;
}

/** One account's model standings in words, e.g. "H100: holds 4 of its 4 nominal (may hold 6), 12.5 card-hours this week, 87.5 left". */
export function modelStandingWords(account: string, standings: readonly ModelStanding[]): string[] {
  return standings.map(
    (s) =>
      `${account}'s ${s.model} cards: holds ${s.held_cards}` +
      (s.nominal_cards !== null ? ` of its ${s.nominal_cards} nominal` : '') +
      (s.limit_cards !== null ? ` (may hold ${s.limit_cards})` : '') +
      `, ${s.usage_card_hours} card-hours ${s.period === '7d' ? 'in the last 7 days' : `this ${s.period}`}` +
      (s.budget_left_card_hours !== null ? `, ${s.budget_left_card_hours} card-hours of budget left` : ''),
  );
}
