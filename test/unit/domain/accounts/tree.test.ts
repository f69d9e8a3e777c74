import { describe, expect, it } from 'vitest';
import {
  type AccountNode,
  budgetPeriod,
  createProblem,
  deleteProblem,
  isoUtc,
  MAX_ACCOUNT_DEPTH,
  normalisedShares,
  quotaProblem,
  setProblem,
} from '../../../../src/domain/accounts/tree.js';

const base: AccountNode[] = [
  { name: 'root', parent: null, weight: 1 },
  { name: 'default', parent: 'root', weight: 1 },
  { name: 'org', parent: 'root', weight: 2 },
  { name: 'team-a', parent: 'org', weight: 1 },
  { name: 'team-b', parent: 'org', weight: 3 },
];
const none = { children: 0, principals: 0, liveTasks: 0 };

describe('account tree rules', () => {
  it('creates under an existing parent; refuses a bad or taken name, an unknown parent, a bad weight', () => {
    expect(createProblem(base, { name: 'team-c', parent: 'org', weight: 2 })).toBeNull();
    for (const name of ['', 'Team', '-x', 'a b', 'x'.repeat(65), '../etc', 'a\u202eb'])
      expect(createProblem(base, { name, parent: 'root' })?.code, name).toBe('INVALID_INPUT');
    expect(createProblem(base, { name: 'team-a', parent: 'root' })?.code).toBe('CONFLICT');
    expect(createProblem(base, { name: 'x', parent: 'nowhere' })?.code).toBe('NOT_FOUND');
    for (const weight of [0, -1, 1.5, 1_000_001, Number.NaN])
      expect(createProblem(base, { name: 'x', parent: 'root', weight })?.code, String(weight)).toBe(
        'INVALID_INPUT',
      );
  });

  it('refuses an account deeper than the limit', () => {
    const chain: AccountNode[] = [{ name: 'root', parent: null, weight: 1 }];
    for (let i = 1; i <= MAX_ACCOUNT_DEPTH; i++)
      chain.push({ name: `d${i}`, parent: i === 1 ? 'root' : `d${i - 1}`, weight: 1 });
    expect(createProblem(chain, { name: 'x', parent: `d${MAX_ACCOUNT_DEPTH - 1}` })).toBeNull();
    expect(createProblem(chain, { name: 'x', parent: `d${MAX_ACCOUNT_DEPTH}` })?.message).toMatch(/deeper/);
  });

  it('moves an account, but never under itself or its descendants (a cycle), and never root', () => {
    expect(setProblem(base, 'team-a', { parent: 'root', weight: 5 })).toBeNull();
    expect(setProblem(base, 'org', { parent: 'team-a' })?.message).toMatch(/cycle/);
    expect(setProblem(base, 'org', { parent: 'org' })?.message).toMatch(/cycle/);
    expect(setProblem(base, 'root', { parent: 'org' })?.code).toBe('INVALID_INPUT');
    expect(setProblem(base, 'nope', { weight: 2 })?.code).toBe('NOT_FOUND');
    expect(setProblem(base, 'team-a', { parent: 'nope' })?.code).toBe('NOT_FOUND');
    expect(setProblem(base, 'team-a', { weight: 0 })?.code).toBe('INVALID_INPUT');
  });

  it('deletes only an empty account, never root or default, naming what holds it', () => {
    expect(deleteProblem(base, 'team-a', none)).toBeNull();
    expect(deleteProblem(base, 'root', none)?.code).toBe('INVALID_INPUT');
    expect(deleteProblem(base, 'default', none)?.code).toBe('INVALID_INPUT');
    expect(deleteProblem(base, 'nope', none)?.code).toBe('NOT_FOUND');
    const held = deleteProblem(base, 'org', { children: 2, principals: 1, liveTasks: 3 });
    expect(held?.code).toBe('INVALID_STATE');
    expect(held?.message).toBe(
      'account org still holds 2 child account(s), 1 principal(s), 3 task(s) not yet ended',
    );
  });

  it('normalised shares multiply weight over siblings down from root', () => {
    const s = normalisedShares(base);
    expect(s.get('root')).toBe(1);
    expect(s.get('default')).toBeCloseTo(1 / 3);
    expect(s.get('org')).toBeCloseTo(2 / 3);
    expect(s.get('team-a')).toBeCloseTo((2 / 3) * (1 / 4));
    expect(s.get('team-b')).toBeCloseTo((2 / 3) * (3 / 4));
    // The leaves under root share all of it.
    expect((s.get('default') ?? 0) + (s.get('team-a') ?? 0) + (s.get('team-b') ?? 0)).toBeCloseTo(1);
  });
});

describe('account quotas', () => {
  const none = { nominal_cards: null, borrowing_limit: null, budget_card_hours: null, budget_period: null };
  const tree = [
    { name: 'root', parent: null, weight: 1, ...none },
    { name: 'org', parent: 'root', weight: 1, ...none, nominal_cards: 8 },
    { name: 'team-a', parent: 'org', weight: 1, ...none, nominal_cards: 4 },
    { name: 'team-b', parent: 'org', weight: 1, ...none, nominal_cards: 2 },
  ];

  it('takes whole card counts, a budget with its period, a borrowing limit beside a nominal share', () => {
    expect(quotaProblem(tree, 'team-b', { ...none, nominal_cards: 4, borrowing_limit: 2 })).toBeNull();
    expect(
      quotaProblem(tree, 'team-b', { ...none, budget_card_hours: 100, budget_period: 'week' }),
    ).toBeNull();
    for (const bad of [
      { ...none, nominal_cards: -1 },
      { ...none, nominal_cards: 1.5 },
      { ...none, borrowing_limit: 2 },
      { ...none, budget_card_hours: 100 },
      { ...none, budget_period: 'day' as const },
      { ...none, budget_card_hours: 0, budget_period: 'day' as const },
      { ...none, budget_card_hours: Number.NaN, budget_period: 'day' as const },
    ])
      expect(quotaProblem(tree, 'team-b', bad)?.code, JSON.stringify(bad)).toBe('INVALID_INPUT');
  });

  it('keeps children’s nominal shares within their parent’s, both ways', () => {
    expect(quotaProblem(tree, 'team-b', { ...none, nominal_cards: 5 })?.message).toBe(
      "team-b's nominal 5 and its siblings' 4 exceed org's nominal 8",
    );
    expect(quotaProblem(tree, 'org', { ...none, nominal_cards: 5 })?.message).toBe(
      "org's children hold nominal shares of 6 cards, more than 5",
    );
    expect(quotaProblem(tree, 'org', { ...none, nominal_cards: 6 })).toBeNull();
  });

  it('budget periods are UTC days, weeks from Monday and calendar months', () => {
    const at = Date.parse('2026-12-05T19:00:00Z'); // a Saturday
    const iso = (p: { start: number; end: number }) => [isoUtc(p.start), isoUtc(p.end)];
    expect(iso(budgetPeriod('day', at))).toEqual(['2026-12-05T00:00:00Z', '2026-12-06T00:00:00Z']);
    expect(iso(budgetPeriod('week', at))).toEqual(['2026-11-30T00:00:00Z', '2026-12-07T00:00:00Z']);
    expect(iso(budgetPeriod('month', at))).toEqual(['2026-12-01T00:00:00Z', '2027-01-01T00:00:00Z']);
    expect(iso(budgetPeriod('month', Date.parse('2024-02-29T23:59:59Z')))).toEqual([
      '2024-02-01T00:00:00Z',
      '2024-03-01T00:00:00Z',
    ]);
    expect(iso(budgetPeriod('week', Date.parse('2026-12-07T00:00:00Z')))[0]).toBe('2026-12-07T00:00:00Z');
  });
});
