import { budgetPeriod, normalisedShares } from '../../domain/accounts/tree.js';
import type { AccountRecord } from '../../store/accounts-repo.js';
import type { QueuedTaskRow } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import {
  type ModelStanding,
  modelStandings,
  modelStandingWords,
  type QuotaStanding,
} from './model-standing.js';
import { iso } from './views.js';

/**
 * Where each account stands (docs/operations.md "Accounts and usage"): its share, the
 * cards it holds against its share and quota, its card-hours this period and budget left, and its
 * queued tasks with the first one's wait reason. get_status gives every account to operators
 * (`accounts`: `gpu-broker status`'s ACCOUNTS table, the dashboard's Accounts panel) and the caller's
 * own to everyone (`you`, with the same in words).
 *
 * An account's cards, card-hours and queued tasks count its whole subtree, as its quota and budget do
 * (src/domain/scheduling/account-limits.ts). "This period" is its budget's period (UTC day, week from
 * Monday, month) when it has a budget, else the last 7 days; it counts the leases that ended in it and
 * the live leases' time in it so far, as the budget check does (src/broker/loops/snapshot.ts).
 */
export interface AccountStanding extends QuotaStanding {
  account: string;
  parent: string | null;
  /** Normalised share of the pool (0..1], and in cards of the workers known now. */
  share: number;
  share_cards: number;
  /** Its subtree's QUEUED tasks. */
  queued: number;
  /** The first of them in the queue and why it waits; null when none is queued. */
  first_wait: {
    /** null: the caller may not read the task. */
    task_id: string | null;
    position: number | null;
    code: string;
    message: string;
  } | null;
  /** Its quotas per card model and where it stands against each (./model-standing.ts, ADR 0048). */
  model_quotas: ModelStanding[];
}

const WEEK_MS = 7 * 86_400_000;
const hours = (seconds: number) => Math.round((seconds / 3600) * 1000) / 1000;

/**
 * Every account's standing at `now`, in the accounts' order (root first, then by name). `mayReadTask`
 * says whether the caller may see a task's id.
 */
export function accountStandings(
  deps: BrokerDeps,
  now: number,
  mayReadTask: (ownerId: string) => boolean,
  queued: readonly QueuedTaskRow[] = deps.store.tasks.queuedForScheduling(),
): AccountStanding[] {
  const { store } = deps;
  const list = store.accounts.list();
  const byName = new Map(list.map((a) => [a.name, a]));
  const shares = normalisedShares(list);
  const totalCards = store.workers.list().reduce((n, w) => n + w.cards.length, 0);
  const accountOf = new Map(store.principals.list().map((p) => [p.id, p.account]));
  // An account and every account above it (a cycle or an unknown parent stops the walk).
  const chain = (name: string | undefined): string[] => {
    const out: string[] = [];
    for (let at = name; at !== undefined && byName.has(at) && !out.includes(at); ) {
      out.push(at);
      at = byName.get(at)!.parent ?? undefined;
    }
    return out;
  };
  const add = (m: Map<string, number>, account: string | undefined, n: number) => {
    for (const a of chain(account)) m.set(a, (m.get(a) ?? 0) + n);
  };

  const liveCards = store.leases.liveCards();
  const held = new Map<string, number>();
  for (const c of liveCards) if (c.state !== 'QUARANTINED') add(held, accountOf.get(c.owner_id), 1);

  // Usage since each distinct period start: the ledger's ended leases plus the live leases' time so far.
  const startOf = (a: AccountRecord) =>
    a.budget_period !== null && a.budget_card_hours !== null
      ? budgetPeriod(a.budget_period, now).start
      : now - WEEK_MS;
  const usedSince = new Map<number, Map<string, number>>();
  const leaseById = new Map(store.leases.liveLeases().map((l) => [l.id, l]));
  const usage = (start: number): Map<string, number> => {
    let m = usedSince.get(start);
    if (m !== undefined) return m;
    m = new Map();
    for (const l of store.usage.summary({ by: 'account', since: start, until: now + 1 }))
      add(m, l.key, l.card_seconds);
    for (const c of liveCards) {
      const l = leaseById.get(c.lease_id);
      if (l === undefined) continue;
      const end = l.state === 'QUARANTINED' ? l.updated_at : now;
      add(m, accountOf.get(c.owner_id), Math.max(0, end - Math.max(start, l.created_at)) / 1000);
    }
    usedSince.set(start, m);
    return m;
  };

  const byModel = modelStandings(
    deps,
    now,
    list,
    store.accounts.modelQuotas(),
    { cards: liveCards, leases: leaseById },
    (owner) => accountOf.get(owner),
  );

  const queuedBy = new Map<string, number>();
  const first = new Map<string, { position: number; entry: AccountStanding['first_wait'] & object }>();
  for (const t of queued) {
    const account = accountOf.get(t.owner_id);
    add(queuedBy, account, 1);
    const info = deps.observe.queueInfo(t.id);
    const reason = (info?.reason ?? {}) as { code?: unknown; message?: unknown };
    const position = info?.position ?? Number.MAX_SAFE_INTEGER;
    for (const a of chain(account)) {
      const known = first.get(a);
      if (known !== undefined && known.position <= position) continue;
      first.set(a, {
        position,
        entry: {
          task_id: mayReadTask(t.owner_id) ? t.id : null,
          position: info?.position ?? null,
          code: typeof reason.code === 'string' ? reason.code : 'queued',
          message: typeof reason.message === 'string' ? reason.message : 'not yet looked at by the scheduler',
        },
      });
    }
  }

  return list.map((a): AccountStanding => {
    const share = shares.get(a.name) ?? (a.parent === null ? 1 : 0);
    const start = startOf(a);
    const used = usage(start).get(a.name) ?? 0;
    const budgeted = a.budget_period !== null && a.budget_card_hours !== null;
    return {
      account: a.name,
      parent: a.parent,
      share: Math.round(share * 1e6) / 1e6,
      share_cards: Math.round(share * totalCards * 10) / 10,
      held_cards: held.get(a.name) ?? 0,
      nominal_cards: a.nominal_cards,
      limit_cards:
        a.nominal_cards !== null && a.borrowing_limit !== null ? a.nominal_cards + a.borrowing_limit : null,
      period: budgeted ? a.budget_period! : '7d',
      period_start: iso(start),
      usage_card_hours: hours(used),
      budget_card_hours: budgeted ? a.budget_card_hours : null,
      budget_left_card_hours: budgeted ? Math.max(0, hours(a.budget_card_hours! * 3600 - used)) : null,
      budget_resets_at: budgeted ? iso(budgetPeriod(a.budget_period!, now).end) : null,
      queued: queuedBy.get(a.name) ?? 0,
      first_wait: first.get(a.name)?.entry ?? null,
      model_quotas: byModel.get(a.name) ?? [],
    };
  });
}

/**
 * The caller's standing in words, as an agent acts on it: which accounts hold more than their share,
 * where its own first queued task stands and why it waits, and whose tasks hold its account's nominal
 * share. E.g. "team-a is over its share (holds 12 of 8 cards); your task t_1 is 3rd in team-b's queue
 * (waiting_for_cards: …); team-b's nominal 4 cards are in use by your own tasks."
 */
export function standingWords(
  mine: AccountStanding,
  all: readonly AccountStanding[],
  yours: {
    held_cards: number;
    first_queued: { task_id: string; position_in_account: number | null; code: string } | null;
  },
): string {
  const parts: string[] = [];
  const over = all.filter(
    (a) =>
      a.account !== mine.account && a.parent !== null && a.held_cards > 0 && a.held_cards > a.share_cards,
  );
  for (const a of over.slice(0, 3))
    parts.push(`${a.account} is over its share (holds ${a.held_cards} of ${a.share_cards} cards)`);
  parts.push(
    `${mine.account} holds ${mine.held_cards} of its ${mine.share_cards} cards` +
      (mine.limit_cards !== null ? ` (may hold ${mine.limit_cards})` : '') +
      `, ${mine.usage_card_hours} card-hours ${mine.period === '7d' ? 'in the last 7 days' : `this ${mine.period}`}` +
      (mine.budget_left_card_hours !== null
        ? `, ${mine.budget_left_card_hours} card-hours of budget left`
        : ''),
  );
  if (yours.first_queued !== null) {
    const at = yours.first_queued.position_in_account;
    parts.push(
      `your task ${yours.first_queued.task_id} is ` +
        (at !== null ? `${ordinal(at)} in ${mine.account}'s queue` : `queued in ${mine.account}`) +
        ` (${yours.first_queued.code})`,
    );
  } else if (mine.queued > 0)
    parts.push(`${mine.account} has ${mine.queued} task(s) queued, none of them yours`);
  parts.push(...modelStandingWords(mine.account, mine.model_quotas));
  if (mine.nominal_cards !== null && mine.nominal_cards > 0 && mine.held_cards >= mine.nominal_cards)
    parts.push(
      yours.held_cards >= mine.nominal_cards
        ? `${mine.account}'s nominal ${mine.nominal_cards} cards are in use by your own tasks`
        : `${mine.account}'s nominal ${mine.nominal_cards} cards are in use (${yours.held_cards} by your tasks)`,
    );
  return `${parts.join('; ')}.`;
}

function ordinal(k: number): string {
  const tens = k % 100;
  const suffix =
    tens >= 11 && tens <= 13 ? 'th' : k % 10 === 1 ? 'st' : k % 10 === 2 ? 'nd' : k % 10 === 3 ? 'rd' : 'th';
  return `${k}${suffix}`;
}
