import { type AccountNode, type AccountProblem, type AccountQuotas, quotaValuesProblem } from './tree.js';

/**
 * Quotas per account and card model (docs/operations.md "Accounts and usage", ADR 0048): beside an
 * account's account-wide quota (./tree.ts `quotaProblem`, cards of every model), a nominal share, a
 * borrowing limit and a card-hour budget for the cards of one model. A model quota names the model as
 * a task's `cards.model` does ("H100" covers "NVIDIA H100 80GB HBM3": case-insensitive, whole words); a
 * model no worker has yet is allowed (it may come online later). Pure, like ./tree.ts: the broker passes
 * what is stored and what a request would change, and gets back the one problem that refuses it.
 */

/** One account's quota for one card model, as the rules see it. */
export interface ModelQuotaNode extends AccountQuotas {
  account: string;
  /** The model's key (`modelKey`): one quota per account and key. */
  model_key: string;
}

/** What a model name may be: letters, digits, spaces, `.`, `_`, `+`, `-`; a letter or digit first. */
export const MODEL_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9 ._+-]{0,63}$/;
/** The most model quotas one account may have (a pool has a handful of models; more is a mistake). */
export const MAX_MODEL_QUOTAS = 32;

/**
 * A model's key: its lower-case letter and digit words joined by single spaces ("NVIDIA H100-SXM" →
 * "nvidia h100 sxm"). Two names with one key are one quota; a card is covered when its model's words
 * hold the key's (the scheduler's `modelWords`, padded, in src/domain/scheduling/requirement.ts).
 */
export function modelKey(model: string): string {
  return model
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w !== '')
    .join(' ');
}

const problem = (code: AccountProblem['code'], message: string, hint: string): AccountProblem => ({
  code,
  message,
  hint,
});

/** Whether `model` may name a model quota. */
export function modelNameProblem(model: string): AccountProblem | null {
  if (!MODEL_NAME_PATTERN.test(model) || modelKey(model) === '')
    return problem(
      'INVALID_INPUT',
      `model ${JSON.stringify(model.slice(0, 80))}: a model is 1-64 letters, digits, spaces, ".", "_", "+" or "-", starting with a letter or digit`,
      'Name it as a task spec’s cards.model does, e.g. H100 or A100-SXM4 (a model no worker has yet is allowed).',
    );
  return null;
}

/**
 * Whether `name` may have `quota` for the model `key` (null: the quota is removed) among `accounts` and
 * the stored model quotas: the values as an account-wide quota's; at most MAX_MODEL_QUOTAS per account;
 * and, for the same model, children's nominal shares summing within their parent's, both ways (a parent's
 * never drops below what its children hold, a child's never pushes the sum past its parent's). A child's
 * model quota under a parent without one for that model is bounded by nothing but its own account line's
 * quotas, which all apply to it when it runs.
 */
export function modelQuotaProblem(
  accounts: readonly AccountNode[],
  quotas: readonly ModelQuotaNode[],
  name: string,
  key: string,
  quota: AccountQuotas | null,
): AccountProblem | null {
  if (quota === null) return null;
  const values = quotaValuesProblem(quota);
  if (values) return { ...values, message: `model ${key}: ${values.message}` };
  const own = quotas.filter((q) => q.account === name);
  if (own.length >= MAX_MODEL_QUOTAS && !own.some((q) => q.model_key === key))
    return problem(
      'INVALID_INPUT',
      `${name} already has ${own.length} model quotas, the most one account may have`,
      'Clear one first (--nominal none and --budget none with --model), or use the account-wide quota.',
    );
  if (quota.nominal_cards === null) return null;
  const nominalOf = (account: string) =>
    quotas.find((q) => q.account === account && q.model_key === key)?.nominal_cards ?? null;
  const parent = accounts.find((a) => a.name === name)?.parent ?? null;
  const parentNominal = parent === null ? null : nominalOf(parent);
  if (parent !== null && parentNominal !== null) {
    const siblings = accounts
      .filter((a) => a.parent === parent && a.name !== name)
      .reduce((n, a) => n + (nominalOf(a.name) ?? 0), 0);
    if (siblings + quota.nominal_cards > parentNominal)
      return problem(
        'INVALID_INPUT',
        `${name}'s nominal ${quota.nominal_cards} ${key} cards and its siblings' ${siblings} exceed ${parent}'s nominal ${parentNominal} ${key} cards`,
        `Children's nominal shares of a model sum within their parent's: raise ${parent}'s (--model ${key}) or lower another child's first.`,
      );
  }
  const children = accounts
    .filter((a) => a.parent === name)
    .reduce((n, a) => n + (nominalOf(a.name) ?? 0), 0);
  if (children > quota.nominal_cards)
    return problem(
      'INVALID_INPUT',
      `${name}'s children hold nominal shares of ${children} ${key} cards, more than ${quota.nominal_cards}`,
      'Lower the children first, or give this account at least their sum.',
    );
  return null;
}

/** Whether a card of `model` counts against a quota with `key`: its words hold the key's, whole words. */
export function modelCovers(key: string, model: string): boolean {
  return ` ${modelKey(model)} `.includes(` ${key} `);
}

/**
 * What each quota's account and every account below it have of the quota's model among `rows` (cards
 * held, card-seconds used), by `quotaSlot(account, model_key)`. `parentOf` walks the tree (a cycle or an
 * unknown parent stops the walk).
 */
export function sumPerQuota(
  quotas: ReadonlyArray<{ account: string; model_key: string }>,
  parentOf: ReadonlyMap<string, string | null>,
  rows: ReadonlyArray<{ account: string; model: string; amount: number }>,
): Map<string, number> {
  const byAccount = new Map<string, string[]>();
  for (const q of quotas) byAccount.set(q.account, [...(byAccount.get(q.account) ?? []), q.model_key]);
  const out = new Map<string, number>();
  for (const r of rows) {
    const seen = new Set<string>();
    for (let at: string | null | undefined = r.account; at && !seen.has(at); at = parentOf.get(at)) {
      seen.add(at);
      for (const key of byAccount.get(at) ?? [])
        if (modelCovers(key, r.model))
          out.set(quotaSlot(at, key), (out.get(quotaSlot(at, key)) ?? 0) + r.amount);
    }
  }
  return out;
}

/** The key of one account's quota for one model in `sumPerQuota`'s map. */
export function quotaSlot(account: string, modelKey: string): string {
  return `${account}\u0000${modelKey}`;
}
