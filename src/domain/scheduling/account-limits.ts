import { type FullModels, ModelLimits } from './model-limits.js';
import { accountBudgetExhausted, accountQuotaExceeded } from './reasons.js';
import type { AccountView, FairShareView, WaitReason } from './types.js';

/**
 * The accounts' quotas in one pass (docs/operations.md "Accounts and usage"). An account's cards count
 * for it and for every account above it; a task waits when its account, or one above, would hold more
 * than nominal + borrowing limit, or has spent its card-hour budget this period. Pure; `grant` records
 * a grant of this pass so later tasks see it. Quotas per card model (ADR 0048) are `models`'
 * (./model-limits.ts); where a method takes the cards' models, it counts them there too.
 */
export class AccountLimits {
  /** Cards held by each account's subtree, this pass's grants included. */
  private readonly held = new Map<string, number>();

  /** The quotas per card model; null where no account has one. */
  private readonly models: ModelLimits | null;

  constructor(private readonly fair: FairShareView | undefined) {
    for (const [name, a] of Object.entries(fair?.accounts ?? {}))
      if (a.running_cards > 0) this.add(name, a.running_cards);
    const models = fair ? new ModelLimits(fair, (a) => this.chain(a)) : null;
    this.models = models?.active ? models : null;
  }

  /** Whether some account has a quota per card model (the pass then reads the cards' models). */
  get hasModelQuotas(): boolean {
    return this.models !== null;
  }

  /**
   * The model quotas of `account`'s line that `need` more cards would pass, or whose budget is spent: the
   * task may only take cards of other models (ADR 0048). Null when none is (or there are none).
   */
  fullModels(account: string | undefined, need: number): FullModels | null {
    if (this.models === null || account === undefined) return null;
    return this.models.full(account, need);
  }

  /** A card model's padded words, as model quotas match them (only where there are model quotas). */
  wordsOf(model: string): string {
    return this.models?.words(model) ?? '';
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

  /**
   * Whether a task of `account` needing `need` more cards asks within a guarantee: the account has a
   * nominal share, and it and every account above it with one would hold at most their nominal cards.
   * With `models` (the padded words of the cards it would take there): a quota of its own with a nominal
   * share for each of them is a guarantee too, and every model quota with a nominal share in its line
   * covering them must hold at most that nominal with it as well.
   */
  withinNominal(account: string | undefined, need: number, models?: readonly string[]): boolean {
    if (!this.fair || account === undefined) return false;
    const byModel =
      models === undefined || this.models === null ? null : this.models.withinNominal(account, need, models);
    if (byModel === false) return false;
    const own = this.fair.accounts[account];
    if (byModel === null && (own?.nominal_cards === null || own?.nominal_cards === undefined)) return false;
    for (const name of this.chain(account)) {
      const nominal = this.fair.accounts[name]!.nominal_cards;
      if (nominal !== null && nominal !== undefined && (this.held.get(name) ?? 0) + need > nominal)
        return false;
    }
    return true;
  }

  /**
   * Whether `account` borrows: its subtree holds more cards than its nominal share (no nominal share: 0,
   * so every card it holds is borrowed), `less` cards (those about to be preempted) not counted.
   */
  borrowing(account: string, less = 0): boolean {
    return this.borrowed(account, less) > 0;
  }

  /**
   * How many cards `account` holds beyond its nominal share, `less` not counted (0 or below: none). With
   * `models` (the padded words of a lease's cards): beyond its own model quotas' nominal shares where one
   * covers them (ADR 0048), else account-wide.
   */
  borrowed(account: string, less = 0, models?: readonly string[]): number {
    const a = this.fair?.accounts[account];
    if (!a) return 0;
    const byModel =
      models === undefined || this.models === null ? null : this.models.borrowed(account, less, models);
    if (byModel !== null) return byModel;
    return (this.held.get(account) ?? 0) - less - (a.nominal_cards ?? 0);
  }

  /**
   * Takes `cards` off `account`'s count (and those above it): a preemption gives them back. `models`: the
   * padded words of each card, for the model quotas.
   */
  release(account: string, cards: number, models?: readonly string[]): void {
    this.add(account, -cards);
    if (this.models !== null && models !== undefined) for (const w of models) this.models.add(account, w, -1);
  }

  /** Records `need` cards granted to a task of `account`; `models`: each card's padded words, as `release`. */
  grant(account: string | undefined, need: number, models?: readonly string[]): void {
    if (!this.fair || account === undefined) return;
    this.add(account, need);
    if (this.models !== null && models !== undefined) for (const w of models) this.models.add(account, w, 1);
  }

  private add(account: string, cards: number): void {
    for (const name of this.chain(account)) this.held.set(name, (this.held.get(name) ?? 0) + cards);
  }

  /** `account` and the accounts above it that the view knows, nearest first (a cycle stops the walk). */
  chain(account: string): string[] {
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
