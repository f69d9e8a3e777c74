import type { FairShareNote, FairShareView, QueuedTaskView } from './types.js';

/**
 * The order of a pass across accounts (docs/operations.md "Accounts and usage"). Pure.
 *
 * Priority first, as ever: a higher `priority` runs before a lower one whatever its account. Within one
 * priority, account by account: always the account with the lowest level that still has tasks, its own
 * oldest first. An aged task (waited past `reservation_after_seconds`) reserves cards when its turn
 * comes, as before; it does not jump the accounts' order (tried: in a saturated pool every task is aged,
 * and aged-first made the order first come, not fair; docs/performance.md "Fair share"). An account's
 * level is how much of its share it holds:
 *
 *        level = (cards it holds now + cards granted to it in this pass) / (share × cards in the pool)
 *              + its decayed usage / (share × every account's decayed usage)
 *
 *     0 is an account that holds and used nothing; 2 is one at its share on both counts. The first term
 *     splits the pool now by weight (as Kueue's weighted share does); the second, usage decayed with a
 *     half-life, gives back to an account what another took before (as Slurm's fair-share factor does).
 *     Equal levels go to the account whose next task comes first by age, so one account alone orders
 *     exactly as before (priority, then age).
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
  const totalCards = Math.max(1, fair?.total_cards ?? 1);
  const totalUsage = Math.max(
    1,
    Object.values(fair?.accounts ?? {}).reduce((n, a) => n + a.usage, 0),
  );
  for (const priority of [...byPriority.keys()].sort((a, b) => b - a)) {
    const level = byPriority.get(priority)!;
    const queues = new Map<string, QueuedTaskView[]>();
    for (const t of level) {
      const account = t.account ?? '';
      const q = queues.get(account);
      if (q) q.push(t);
      else queues.set(account, [t]);
    }
    if (queues.size === 1) {
      yield* [...queues.values()][0]!.sort(compare);
      continue;
    }
    yield* acrossAccounts(queues, fair, totalCards, totalUsage, compare, granted);
  }
}

function* acrossAccounts(
  queues: Map<string, QueuedTaskView[]>,
  fair: FairShareView | undefined,
  totalCards: number,
  totalUsage: number,
  compare: (a: QueuedTaskView, b: QueuedTaskView) => number,
  granted: ReadonlyMap<string, number>,
): Generator<QueuedTaskView> {
  for (const q of queues.values()) q.sort(compare).reverse(); // pop() takes the first
  const levelOf = (account: string): number => {
    const a = fair?.accounts[account];
    const share = a && a.share > 0 ? a.share : 1 / queues.size;
    const held = (a?.running_cards ?? 0) + (granted.get(account) ?? 0);
    return held / (share * totalCards) + (a?.usage ?? 0) / (share * totalUsage);
  };
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
  const totalUsage = Math.max(
    1,
    Object.values(fair.accounts).reduce((n, x) => n + x.usage, 0),
  );
  const totalCards = Math.max(1, fair.total_cards);
  const share = a.share > 0 ? a.share : 1;
  const held = a.running_cards + grantedCards;
  return {
    account,
    level: Math.round((held / (share * totalCards) + a.usage / (share * totalUsage)) * 100) / 100,
    held_cards: held,
    share_cards: Math.round(share * totalCards * 10) / 10,
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
