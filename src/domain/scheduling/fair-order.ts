import type { FairShareNote, FairShareView, QueuedTaskView } from './types.js';

/**
 * The order of a pass across accounts (docs/operations.md "Fair share"). Pure.
 *
 * Priority first, as ever: a higher `priority` runs before a lower one whatever its account. Within one
 * priority, account by account: always the account with the lowest level that still has tasks, its own
 * oldest first, in two rounds:
 *
 *   1. the widest tasks (those needing the most cards of any task queued at this priority) of every
 *      account whose level is at most WIDE_SLACK above the poorest account with only narrower tasks
 *      queued, each account's in its own order;
 *   2. the rest.
 *
 * Round 1 is why the pool stays busy (docs/performance.md "Fair share"): cards that free all at once (a
 * wide task ended) go to the next wide task before a small task can split them, so the pool seldom has
 * to drain a worker for a wide task. A small task behind a wide one of its own account loses nothing it
 * could have had: the wide task takes cards only where it fits whole, and the small task gets the rest of
 * the same pass. (Measured on the `fairness` bench: keeping each account's age order strictly, 84.6 % of
 * the cards busy; with round 1, 92 %.) WIDE_SLACK keeps round 1 from starving an account that only has
 * smaller tasks queued. An aged task reserves cards when its turn comes, as before; it does not jump the
 * accounts' order (in a saturated pool every task is aged, and aged-first made the order first come).
 *
 * An account's level is its decayed usage against its share, plus a tenth of the cards it holds now:
 *
 *        level = its decayed usage / (share × every account's decayed usage)
 *              + HELD_WEIGHT × (cards it holds now + cards granted to it in this pass) / (share × cards in the pool)
 *
 *     0 is an account that holds and used nothing; 1 + HELD_WEIGHT one at its share on both counts. The
 *     usage term, decayed with a half-life, is Slurm's fair-share factor: it gives back to an account
 *     what another took before, so over time each busy account gets its weight's share of card-seconds.
 *     The held term splits the cards of one pass by weight (as Kueue's weighted share does) and orders a
 *     pool nobody has used yet; at full weight (1, the first cut) it drowned the usage term (8 cards of
 *     16 are 0.5 on it) and the split stayed near a third each for weights 1:1:2 (27 / 27 / 46 %).
 *     Equal levels go to the account whose next task comes first by age, so one account alone orders
 *     exactly as before (priority, then age; no rounds).
 *
 * `granted` holds the cards granted to each account so far in this pass (the caller adds to it after
 * each grant), so the next pick sees the account's new level. No `fair_share`: one account for everyone.
 */
export function* fairOrder(
  tasks: readonly QueuedTaskView[],
  fair: FairShareView | undefined,
  compare: (a: QueuedTaskView, b: QueuedTaskView) => number,
  granted: ReadonlyMap<string, number>,
): Generator<QueuedTaskView> {
  const byPriority = new Map<number, QueuedTaskView[]>();
  for (const t of tasks) {
    const same = byPriority.get(t.priority);
    if (same) same.push(t);
    else byPriority.set(t.priority, [t]);
  }
  const totals = totalsOf(fair);
  for (const priority of [...byPriority.keys()].sort((a, b) => b - a)) {
    const level = byPriority.get(priority)!;
    let widest = 0;
    const accounts = new Set<string>();
    for (const t of level) {
      accounts.add(t.account ?? '');
      if (t.cards.count > widest) widest = t.cards.count;
    }
    if (accounts.size === 1) {
      yield* level.sort(compare);
      continue;
    }
    // Round 1: the widest tasks of the accounts that may go first; round 2: the rest (see above).
    const hasWide = new Set<string>();
    for (const t of level) if (t.cards.count === widest) hasWide.add(t.account ?? '');
    const levels = new Map<string, number>();
    let poorestNarrow = Number.POSITIVE_INFINITY;
    for (const a of accounts) {
      const l = levelIn(fair, a, accounts.size, granted, totals);
      levels.set(a, l);
      if (!hasWide.has(a)) poorestNarrow = Math.min(poorestNarrow, l);
    }
    const rounds = [new Map<string, QueuedTaskView[]>(), new Map<string, QueuedTaskView[]>()] as const;
    for (const t of level) {
      const account = t.account ?? '';
      const first = t.cards.count === widest && levels.get(account)! <= poorestNarrow + WIDE_SLACK;
      const queues = rounds[first ? 0 : 1];
      const q = queues.get(account);
      if (q) q.push(t);
      else queues.set(account, [t]);
    }
    for (const queues of rounds) yield* acrossAccounts(queues, fair, totals, compare, granted);
  }
}

/**
 * How far above the poorest account that has only narrower tasks queued (at the same priority) an
 * account's level may be for its widest tasks to go in round 1 (see fairOrder). Without this bound an
 * account of small tasks could wait for hours while others' wide tasks took every worker that freed
 * whole: on one 8-card worker the `fairness` workload gave 40 / 6 / 54 % over its first 3 hours. With
 * 0 (strictly not richer) the pool was 87-89 % busy and an 8-card task waited up to 52 minutes once it
 * led its account's; 0.25 gives 92-93 %, at most 29 minutes, and 3 % off the weights over 24 hours.
 */
export const WIDE_SLACK = 0.25;

/**
 * How much the cards an account holds now count against its decayed usage in its level (see
 * fairOrder). Measured on the `fairness` bench's three accounts (weights 1:1:2, half-life 6 h; before WIDE_SLACK): 0 gave
 * 25.6 / 25.1 / 49.3 %, 0.1 25.6 / 25.5 / 48.9 %, 0.25 26.0 / 26.3 / 47.7 %, 1 27.6 / 27.9 / 44.5 %.
 */
export const HELD_WEIGHT = 0.1;

interface Totals {
  cards: number;
  usage: number;
}

function totalsOf(fair: FairShareView | undefined): Totals {
  let usage = fair?.total_usage;
  // The broker passes the sum: a pass asks once per waiting task (fairShareNote), 10,000 × 50 accounts
  // at the bench's size, and summing each time made the pass ×5 one account's.
  if (usage === undefined) {
    usage = 0;
    for (const a of Object.values(fair?.accounts ?? {})) usage += a.usage;
  }
  return { cards: Math.max(1, fair?.total_cards ?? 1), usage: Math.max(1, usage) };
}

/** `account`'s level now (see fairOrder); an account the view does not know has 1 / `accounts` of the pool. */
function levelIn(
  fair: FairShareView | undefined,
  account: string,
  accounts: number,
  granted: ReadonlyMap<string, number>,
  totals: Totals,
): number {
  const a = fair?.accounts[account];
  const share = a && a.share > 0 ? a.share : 1 / accounts;
  return levelFor(share, a?.usage ?? 0, (a?.running_cards ?? 0) + (granted.get(account) ?? 0), totals);
}

/** An account's level (see fairOrder): `share` its normalised share, `held` its cards with this pass's grants. */
function levelFor(share: number, usage: number, held: number, totals: Totals): number {
  return usage / (share * totals.usage) + (HELD_WEIGHT * held) / (share * totals.cards);
}

function* acrossAccounts(
  queues: Map<string, QueuedTaskView[]>,
  fair: FairShareView | undefined,
  totals: Totals,
  compare: (a: QueuedTaskView, b: QueuedTaskView) => number,
  granted: ReadonlyMap<string, number>,
): Generator<QueuedTaskView> {
  for (const q of queues.values()) q.sort(compare).reverse(); // pop() takes the first
  const levelOf = (account: string): number => levelIn(fair, account, queues.size, granted, totals);
  // A binary heap of accounts by (level, their next task's order): only the account that just had a
  // turn changes its key (its level if granted, its next task), so a pass costs O(tasks × log accounts).
  interface Entry {
    account: string;
    level: number;
    next: QueuedTaskView;
  }
  const before = (x: Entry, y: Entry) =>
    x.level < y.level || (x.level === y.level && compare(x.next, y.next) < 0);
  const heap: Entry[] = [];
  const push = (e: Entry) => {
    heap.push(e);
    for (let i = heap.length - 1; i > 0; ) {
      const up = (i - 1) >> 1;
      if (!before(heap[i]!, heap[up]!)) break;
      [heap[i], heap[up]] = [heap[up]!, heap[i]!];
      i = up;
    }
  };
  const popMin = (): Entry | undefined => {
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last) {
      heap[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && before(heap[l]!, heap[m]!)) m = l;
        if (r < heap.length && before(heap[r]!, heap[m]!)) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m]!, heap[i]!];
        i = m;
      }
    }
    return top;
  };
  for (const [account, q] of queues)
    if (q.length > 0) push({ account, level: levelOf(account), next: q.at(-1)! });
  for (let e = popMin(); e; e = popMin()) {
    const q = queues.get(e.account)!;
    yield q.pop()!;
    // The caller has granted it or not by now: the account's new level and next task.
    if (q.length > 0) push({ account: e.account, level: levelOf(e.account), next: q.at(-1)! });
  }
}

/** The note of `account` after a pass that granted it `grantedCards`; null without fair share. */
export function fairShareNote(
  fair: FairShareView | undefined,
  account: string,
  grantedCards: number,
  position: number,
): FairShareNote | null {
  const a = fair?.accounts[account];
  if (!fair || !a) return null;
  const share = a.share > 0 ? a.share : 1;
  const held = a.running_cards + grantedCards;
  const totals = totalsOf(fair);
  return {
    account,
    level: Math.round(levelFor(share, a.usage, held, totals) * 100) / 100,
    held_cards: held,
    share_cards: Math.round(share * totals.cards * 10) / 10,
    position_in_account: position,
  };
}

/** The words an agent reads after its wait reason. */
export function fairShareWords(n: FairShareNote): string {
  const ordinal = (k: number) =>
    `${k}${k % 10 === 1 && k % 100 !== 11 ? 'st' : k % 10 === 2 && k % 100 !== 12 ? 'nd' : k % 10 === 3 && k % 100 !== 13 ? 'rd' : 'th'}`;
  return (
    ` Fair share: account ${n.account} holds ${n.held_cards} card(s) against a share of ${n.share_cards} ` +
    `(level ${n.level}; accounts with a lower level are served first); this task is ${ordinal(n.position_in_account)} in ${n.account}'s queue.`
  );
}
