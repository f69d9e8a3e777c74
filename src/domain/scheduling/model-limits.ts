import { isoUtc } from '../accounts/tree.js';
import { modelWords } from './requirement.js';
import type { AccountView, FairShareView, ModelQuotaView, WaitReason } from './types.js';

/**
 * The accounts' quotas per card model in one pass (docs/operations.md "Accounts and usage", ADR 0048),
 * beside the account-wide ones of ./account-limits.ts, which owns this. A quota covers the cards whose
 * model's words hold its own ("H100" covers "NVIDIA H100 80GB HBM3"); a card counts for every quota of
 * its account and of every account above it that covers it. Pure; built only where some account has a
 * model quota, so a pool without any pays nothing.
 */

/** A model quota with the cards its account's subtree holds of the model, this pass's grants counted. */
interface Counted extends ModelQuotaView {
  held: number;
}

/** The model quotas a task's account line has filled: the models to keep it off, and why (the first). */
export interface FullModels {
  /** Padded model words (`ModelQuotaView.words`) of the filled quotas, nearest account first. */
  words: string[];
  /** `words` as one string, for the narrowed requirement's key. */
  key: string;
  reason: WaitReason;
}

/** See the file comment. */
export class ModelLimits {
  private readonly quotas = new Map<string, Counted[]>();
  /** Each card model's padded words, read once per pass. */
  private readonly wordsOfModel = new Map<string, string>();
  /** Bumped by every change of a count: `full`'s answers cached before it are stale. */
  private version = 0;
  /**
   * `full`'s answers by account and need, with the version they were given at: a saturated pass asks
   * the same of thousands of waiting tasks, and nothing changes between them.
   */
  private readonly fullCache = new Map<string, { version: number; value: FullModels | null }>();

  constructor(
    fair: FairShareView,
    private readonly chain: (account: string) => string[],
  ) {
    for (const [name, a] of Object.entries(fair.accounts))
      if (a.model_quotas && a.model_quotas.length > 0)
        this.quotas.set(
          name,
          a.model_quotas.map((q) => ({ ...q, held: 0 })),
        );
    if (this.quotas.size === 0) return;
    for (const [name, a] of Object.entries(fair.accounts) as Array<[string, AccountView]>)
      for (const [model, cards] of Object.entries(a.running_by_model ?? {}))
        this.add(name, this.words(model), cards);
  }

  /** Whether any account has a model quota (else every other method is a no-op). */
  get active(): boolean {
    return this.quotas.size > 0;
  }

  /** A card model's padded words (cached). */
  words(model: string): string {
    let w = this.wordsOfModel.get(model);
    if (w === undefined) {
      w = modelWords(model);
      this.wordsOfModel.set(model, w);
    }
    return w;
  }

  /** Adds `cards` cards of the model with `words` to `account`'s line (negative: takes them off). */
  add(account: string, words: string, cards: number): void {
    this.version++;
    for (const at of this.chain(account))
      for (const q of this.quotas.get(at) ?? []) if (words.includes(q.words)) q.held += cards;
  }

  /**
   * The quotas of `account`'s line that `need` more cards of their model would pass (held + need above
   * nominal + borrowing limit, both set) or whose budget is spent, or null when none is.
   */
  full(account: string, need: number): FullModels | null {
    const slot = `${account}\u0000${need}`;
    const cached = this.fullCache.get(slot);
    if (cached !== undefined && cached.version === this.version) return cached.value;
    let out: FullModels | null = null;
    for (const at of this.chain(account))
      for (const q of this.quotas.get(at) ?? []) {
        const reason = overReason(at, q, need);
        if (reason === null) continue;
        if (out === null) out = { words: [q.words], key: '', reason };
        else if (!out.words.includes(q.words)) out.words.push(q.words);
      }
    if (out !== null) out.key = out.words.join('|');
    this.fullCache.set(slot, { version: this.version, value: out });
    return out;
  }

  /**
   * Whether `account` asks within a guarantee on cards of `models` (padded words): every one of them is
   * covered by a quota of its own with a nominal share (null: not every one is, so its model quotas
   * guarantee nothing there), and no quota with a nominal share in its line would hold more than that
   * nominal with `need` more.
   */
  withinNominal(account: string, need: number, models: readonly string[]): boolean | null {
    const own = this.quotas.get(account) ?? [];
    const covered = models.every((w) => own.some((q) => q.nominal_cards !== null && w.includes(q.words)));
    for (const at of this.chain(account))
      for (const q of this.quotas.get(at) ?? [])
        if (
          q.nominal_cards !== null &&
          models.some((w) => w.includes(q.words)) &&
          q.held + need > q.nominal_cards
        )
          return false;
    return covered && models.length > 0 ? true : null;
  }

  /**
   * How many cards of `models` (padded words) `account` holds beyond the nominal shares of its own quotas
   * covering them (the least over them), `less` not counted; null when none of its quotas with a nominal
   * share covers them (the account-wide count decides).
   */
  borrowed(account: string, less: number, models: readonly string[]): number | null {
    let out: number | null = null;
    for (const q of this.quotas.get(account) ?? [])
      if (q.nominal_cards !== null && models.some((w) => w.includes(q.words))) {
        const over = q.held - less - q.nominal_cards;
        out = out === null ? over : Math.min(out, over);
      }
    return out;
  }
}

/** Why `need` more cards of `q`'s model may not go to `account`'s line, or null. */
function overReason(account: string, q: Counted, need: number): WaitReason | null {
  if (q.budget && q.budget.used_card_seconds >= q.budget.limit_card_seconds)
    return modelBudgetExhausted(account, q.model, q.budget);
  if (
    q.nominal_cards !== null &&
    q.borrowing_limit !== null &&
    q.held + need > q.nominal_cards + q.borrowing_limit
  )
    return modelQuotaExceeded(account, q.model, q.nominal_cards, q.borrowing_limit, q.held, need);
  return null;
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** An account (or one above it) would hold more cards of one model than its quota for it allows. */
export function modelQuotaExceeded(
  account: string,
  model: string,
  nominal: number,
  borrowingLimit: number,
  held: number,
  need: number,
): WaitReason {
  const limit = nominal + borrowingLimit;
  const raise = `gpu-broker account set ${account} --model ${shellWord(model)} --nominal/--borrow`;
  const message =
    need > limit
      ? `Needs ${plural(need, `${model} card`)}, more than account ${account} may ever hold of them (nominal ${nominal} + borrowing ${borrowingLimit}); no card of another model it may use is left, so it cannot start unless an operator raises the quota (${raise}).`
      : `${account} holds ${held} of its ${nominal} nominal + ${borrowingLimit} borrowing ${model} cards; ${need} more would pass it, and no card of another model it may use can take it. ` +
        `Frees when one of its ${model} tasks ends, or an operator raises the quota (${raise}).`;
  return {
    code: 'account_quota_exceeded',
    account,
    model,
    limit,
    nominal,
    borrowing_limit: borrowingLimit,
    held,
    need,
    message,
  };
}

/** An account (or one above it) spent its card-hour budget for one model this period. */
export function modelBudgetExhausted(
  account: string,
  model: string,
  budget: { limit_card_seconds: number; used_card_seconds: number; resets_at: number },
): WaitReason {
  const hours = (s: number) => Math.round((s / 3600) * 100) / 100;
  const message =
    `${account} used ${hours(budget.used_card_seconds)} of its ${hours(budget.limit_card_seconds)} ${model} card-hours this period, and no card of another model it may use can take it; ` +
    `resets at ${isoUtc(budget.resets_at)}, or an operator raises it (gpu-broker account set ${account} --model ${shellWord(model)} --budget).`;
  return {
    code: 'account_budget_exhausted',
    account,
    model,
    budget_card_hours: hours(budget.limit_card_seconds),
    used_card_hours: hours(budget.used_card_seconds),
    resets_at: budget.resets_at,
    message,
  };
}

/** A model name as one shell word in a suggested command: quoted when it holds a space ("Simulated GPU"). */
function shellWord(model: string): string {
  return /^[A-Za-z0-9._+-]+$/.test(model) ? model : `'${model}'`;
}
