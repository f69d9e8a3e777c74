import { describe, expect, it } from 'vitest';
import {
  type AccountNode,
  createProblem,
  deleteProblem,
  MAX_ACCOUNT_DEPTH,
  normalisedShares,
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
