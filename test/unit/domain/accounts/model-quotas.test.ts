import { describe, expect, it } from 'vitest';
import {
  MAX_MODEL_QUOTAS,
  type ModelQuotaNode,
  modelKey,
  modelNameProblem,
  modelQuotaProblem,
  quotaSlot,
  sumPerQuota,
} from '../../../../src/domain/accounts/model-quotas.js';
import type { AccountNode, AccountQuotas } from '../../../../src/domain/accounts/tree.js';

/** Quotas per account and card model (ADR 0048): names, values, and children summing within parents. */

const tree: AccountNode[] = [
  { name: 'root', parent: null, weight: 1 },
  { name: 'org', parent: 'root', weight: 1 },
  { name: 'team-a', parent: 'org', weight: 1 },
  { name: 'team-b', parent: 'org', weight: 1 },
];
const none: AccountQuotas = {
  nominal_cards: null,
  borrowing_limit: null,
  budget_card_hours: null,
  budget_period: null,
};
const q = (account: string, model_key: string, nominal: number | null): ModelQuotaNode => ({
  ...none,
  account,
  model_key,
  nominal_cards: nominal,
});

describe('model quotas', () => {
  it('keys a model by its lower-case words, so H100 and h100 are one quota', () => {
    expect(modelKey('H100')).toBe('h100');
    expect(modelKey('  NVIDIA  A100-SXM4_80GB ')).toBe('nvidia a100 sxm4 80gb');
  });

  it('allows any sensible model name (one no worker has yet too); refuses empty and absurd ones', () => {
    for (const ok of ['H100', 'A100-SXM4', 'DCU K100_AI', 'RTX 4090', 'h100+nvl'])
      expect(modelNameProblem(ok)).toBeNull();
    for (const bad of [
      '',
      ' ',
      '-',
      '...',
      'x'.repeat(65),
      'H100\n',
      'H100;rm',
      '../etc',
      'a\u202eb',
      '\u0000',
    ])
      expect(modelNameProblem(bad)?.code, JSON.stringify(bad)).toBe('INVALID_INPUT');
  });

  it('refuses the values an account-wide quota refuses, naming the model', () => {
    for (const bad of [
      { ...none, nominal_cards: -1 },
      { ...none, nominal_cards: 1.5 },
      { ...none, nominal_cards: 100_001 },
      { ...none, nominal_cards: 2, borrowing_limit: -2 },
      { ...none, borrowing_limit: 2 },
      { ...none, budget_card_hours: 10 },
      { ...none, budget_card_hours: -1, budget_period: 'week' as const },
      { ...none, budget_card_hours: Number.POSITIVE_INFINITY, budget_period: 'day' as const },
    ]) {
      const p = modelQuotaProblem(tree, [], 'team-a', 'h100', bad);
      expect(p?.code, JSON.stringify(bad)).toBe('INVALID_INPUT');
      expect(p?.message).toMatch(/^model h100: /);
    }
    expect(
      modelQuotaProblem(tree, [], 'team-a', 'h100', { ...none, nominal_cards: 4, borrowing_limit: 2 }),
    ).toBeNull();
    expect(modelQuotaProblem(tree, [], 'team-a', 'h100', null)).toBeNull();
  });

  it('children sum within their parent’s nominal of the same model, both ways; other models do not count', () => {
    const stored = [q('org', 'h100', 8), q('team-a', 'h100', 5), q('team-b', 'a100', 6)];
    expect(modelQuotaProblem(tree, stored, 'team-b', 'h100', { ...none, nominal_cards: 3 })).toBeNull();
    const over = modelQuotaProblem(tree, stored, 'team-b', 'h100', { ...none, nominal_cards: 4 });
    expect(over?.message).toBe(
      "team-b's nominal 4 h100 cards and its siblings' 5 exceed org's nominal 8 h100 cards",
    );
    expect(over?.hint).toMatch(/raise org's/);
    expect(modelQuotaProblem(tree, stored, 'org', 'h100', { ...none, nominal_cards: 4 })?.message).toBe(
      "org's children hold nominal shares of 5 h100 cards, more than 4",
    );
    // A100: org has no A100 quota, so team-b's is bounded by nothing above it.
    expect(modelQuotaProblem(tree, stored, 'team-b', 'a100', { ...none, nominal_cards: 60 })).toBeNull();
    // Clearing the parent's nominal (or the whole quota) is never refused.
    expect(modelQuotaProblem(tree, stored, 'org', 'h100', null)).toBeNull();
    expect(
      modelQuotaProblem(tree, stored, 'org', 'h100', { ...none, budget_card_hours: 5, budget_period: 'day' }),
    ).toBeNull();
  });

  it('refuses one model quota past the most per account, but changes an existing one there', () => {
    const many = Array.from({ length: MAX_MODEL_QUOTAS }, (_, i) => q('team-a', `m${i}`, 1));
    expect(modelQuotaProblem(tree, many, 'team-a', 'h100', { ...none, nominal_cards: 1 })?.message).toMatch(
      /already has 32 model quotas/,
    );
    expect(modelQuotaProblem(tree, many, 'team-a', 'm3', { ...none, nominal_cards: 2 })).toBeNull();
  });

  it('sums what each quota’s account and those below it have of its model, whole words only', () => {
    const parentOf = new Map<string, string | null>([
      ['root', null],
      ['org', 'root'],
      ['team-a', 'org'],
      ['team-b', 'org'],
    ]);
    const sums = sumPerQuota(
      [
        { account: 'org', model_key: 'h100' },
        { account: 'team-a', model_key: 'h100' },
        { account: 'team-a', model_key: 'a100' },
      ],
      parentOf,
      [
        { account: 'team-a', model: 'NVIDIA H100 80GB HBM3', amount: 2 },
        { account: 'team-b', model: 'NVIDIA H100-SXM', amount: 3 },
        { account: 'team-a', model: 'NVIDIA H1000', amount: 7 },
        { account: 'team-a', model: 'NVIDIA A100-SXM4-80GB MIG 1g.10gb', amount: 0.5 },
        { account: 'root', model: 'NVIDIA H100', amount: 11 },
      ],
    );
    expect(sums.get(quotaSlot('org', 'h100'))).toBe(5);
    expect(sums.get(quotaSlot('team-a', 'h100'))).toBe(2);
    expect(sums.get(quotaSlot('team-a', 'a100'))).toBe(0.5);
  });
});
