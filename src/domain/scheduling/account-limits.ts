import { accountBudgetExhausted, accountQuotaExceeded } from './reasons.js';
import type { AccountView, FairShareView, WaitReason } from './types.js';

/**
 * The accounts' quotas in one pass (docs/operations.md "Accounts and usage"). An account's cards count
 * for it and for every account above it; a task waits when its account, or one above, would hold more
 * than nominal + borrowing limit, or has spent its card-hour budget this period. Pure; `grant` records
 * a grant of this pass so later tasks see it.
 */
export class AccountLimits {
  /** Cards held by each account's subtree, this pass's grants included. */
  private readonly held = new Map<string, number>();

  constructor(private readonly fair: FairShareView | undefined) {
    for (const [name, a] of Object.entries(fair?.accounts ?? {}))
      if (a.running_cards > 0) this.add(name, a.running_cards);
  }

  /** Why a task of `account` needing `need` cards must wait, or null. */
  check(account: string | undefined, need: number): WaitReason | null {
    if (!this.fair || account === undefined) return null;
    for (const name of this.chain(account)) {
      const a = this.fair.accounts[name]!;
      if (a.budget && a.budget.used_card_seconds >= a.budget.limit_card_seconds)
        return accountBudgetExhausted(
          name,
          a.budget.limit_card_seconds,
          a.budget.used_card_seconds,
          a.budget.resets_at,
        );
      if (
        a.nominal_cards !== null &&
        a.nominal_cards !== undefined &&
        a.borrowing_limit !== null &&
        a.borrowing_limit !== undefined
      ) {
        const held = this.held.get(name) ?? 0;
        if (held + need > a.nominal_cards + a.borrowing_limit)
          return accountQuotaExceeded(name, a.nominal_cards, a.borrowing_limit, held, need);
      }
    }
    return null;
  }

  /** Records `need` cards granted to a task of `account`. */
  grant(account: string | undefined, need: number): void {
    if (this.fair && account !== undefined) this.add(account, need);
  }

  private add(account: string, cards: number): void {
    for (const name of this.chain(account)) this.held.set(name, (this.held.get(name) ?? 0) + cards);
  }

  /** `account` and the accounts above it that the view knows, nearest first (a cycle stops the walk). */
  private chain(account: string): string[] {
    const out: string[] = [];
    for (let at: string | null | undefined = account; at && out.length <= 64; ) {
      const a: AccountView | undefined = this.fair?.accounts[at];
      if (!a || out.includes(at)) break;
      out.push(at);
      at = a.parent;
    }
    return out;
  }
}
