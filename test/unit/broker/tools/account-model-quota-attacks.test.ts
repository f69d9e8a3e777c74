import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BrokerError } from '../../../../src/contracts/errors.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';

/**
 * A hostile review of quotas per card model over the tools MCP and REST share (ADR 0048): wrong types
 * for `model` and its fields, a non-operator, a deleted account's quotas (they go with it, so a new
 * account of the same name starts with none), and a move combined with a model change.
 */

let f: BrokerFixture;
let ops: Principal;
let n = 0;
const key = () => `k${++n}`;

beforeEach(async () => {
  f = makeBrokerDeps();
  ops = f.principal('ops', ['operator']);
  await f.invoke(ops, 'create_account', {
    name: 'org',
    model: 'H100',
    nominal_cards: 8,
    idempotency_key: key(),
  });
  await f.invoke(ops, 'create_account', {
    name: 'team-a',
    parent: 'org',
    model: 'H100',
    nominal_cards: 4,
    idempotency_key: key(),
  });
});
afterEach(() => f.close());

const auditCount = () =>
  (f.deps.store.db.prepare('SELECT count(*) AS n FROM audit_events').get() as { n: number }).n;

async function refused(
  tool: string,
  input: Record<string, unknown>,
  who: Principal = ops,
): Promise<BrokerError> {
  const err = (await f.invoke(who, tool, { ...input, idempotency_key: key() }).catch((e: unknown) => e)) as
    | BrokerError
    | undefined;
  if (err === undefined || !(err instanceof Error))
    throw new Error(`${tool} accepted ${JSON.stringify(input)}`);
  return err;
}

describe('model quota attacks over the tools', () => {
  it('wrong types for model and its fields are typed errors that change nothing', async () => {
    const quotas = f.deps.store.accounts.modelQuotas();
    const audit = auditCount();
    const attempts: Array<Record<string, unknown>> = [
      { name: 'team-a', model: 123, nominal_cards: 1 },
      { name: 'team-a', model: null, nominal_cards: 1 },
      { name: 'team-a', model: ['H100'], nominal_cards: 1 },
      { name: 'team-a', model: { name: 'H100' }, nominal_cards: 1 },
      { name: 'team-a', model: 'H100', nominal_cards: '4' },
      { name: 'team-a', model: 'H100', nominal_cards: Number.NaN },
      { name: 'team-a', model: 'H100', nominal_cards: Number.POSITIVE_INFINITY },
      { name: 'team-a', model: 'H100', budget_card_hours: -1, budget_period: 'day' },
      { name: 'team-a', model: 'H100', budget_card_hours: 10, budget_period: 'year' },
      { name: 'team-a', model: 'H100', models: ['A100'] }, // an unknown field
      { name: 'team-a', model: '-H100', nominal_cards: 1 }, // not a letter or digit first
      { name: 'team-a', model: 'H100\nA100', nominal_cards: 1 },
      { name: 'team-a', model: 'Ｈ１００', nominal_cards: 1 }, // full-width letters
    ];
    for (const input of attempts) {
      const err = await refused('set_account', input);
      expect(err.code, JSON.stringify(input)).toBe('INVALID_INPUT');
      expect(err.hint, JSON.stringify(input)).toBeTruthy();
      const created = await refused('create_account', { ...input, name: 'team-x', parent: 'org' });
      expect(created.code, JSON.stringify(input)).toBe('INVALID_INPUT');
    }
    expect(f.deps.store.accounts.get('team-x')).toBeUndefined();
    expect(f.deps.store.accounts.modelQuotas()).toEqual(quotas);
    expect(auditCount()).toBe(audit);
  });

  it('a submitter cannot set a model quota, not even its own account’s', async () => {
    const agent = f.principal('agent', ['submitter']);
    const quotas = f.deps.store.accounts.modelQuotas();
    const err = await refused('set_account', { name: 'team-a', model: 'H100', nominal_cards: 8 }, agent);
    expect(['FORBIDDEN', 'UNAUTHORIZED', 'PERMISSION_DENIED']).toContain(err.code);
    expect(f.deps.store.accounts.modelQuotas()).toEqual(quotas);
  });

  it('a deleted account’s model quotas go with it: a new account of the same name has none', async () => {
    await f.invoke(ops, 'create_account', {
      name: 'gone',
      model: 'A100',
      nominal_cards: 2,
      budget_card_hours: 10,
      budget_period: 'day',
      idempotency_key: key(),
    });
    await f.invoke(ops, 'delete_account', { name: 'gone', idempotency_key: key() });
    expect(f.deps.store.accounts.modelQuotas().filter((q) => q.account === 'gone')).toEqual([]);
    await f.invoke(ops, 'create_account', { name: 'gone', idempotency_key: key() });
    expect(f.deps.store.accounts.modelQuotas().filter((q) => q.account === 'gone')).toEqual([]);
  });

  it('an account with children holding a model quota cannot be deleted (their sum would be unchecked)', async () => {
    const err = await refused('delete_account', { name: 'org' });
    expect(err.code).toBe('INVALID_STATE');
    expect(err.hint).toBeTruthy();
    expect(f.deps.store.accounts.modelQuotas().map((q) => q.account)).toContain('org');
  });

  it('children are summed per spelling of the model’s words: a child’s “NVIDIA H100” is not held to its parent’s “H100” here (the pass applies both)', async () => {
    // Pinned as built (docs/operations.md "Quotas per card model"); model-quota-attacks in the scheduling
    // tests shows the parent's H100 quota still capping such a child at run time.
    await f.invoke(ops, 'set_account', {
      name: 'team-a',
      model: 'NVIDIA H100',
      nominal_cards: 100,
      idempotency_key: key(),
    });
    expect(
      f.deps.store.accounts
        .modelQuotas()
        .filter((q) => q.account === 'team-a')
        .map((q) => q.model_key)
        .sort(),
    ).toEqual(['h100', 'nvidia h100']);
    // The same words, spelled otherwise, are one quota and are held to the parent's.
    const err = await refused('set_account', { name: 'team-a', model: 'h100', nominal_cards: 9 });
    expect(err.code).toBe('INVALID_INPUT');
  });

  it('a move with a model change checks the model quota as it will be under the new parent', async () => {
    await f.invoke(ops, 'create_account', {
      name: 'small',
      model: 'H100',
      nominal_cards: 2,
      idempotency_key: key(),
    });
    // Moving team-a (4 H100) under small (2 H100) while raising its H100 share: refused, nothing moves.
    const err = await refused('set_account', {
      name: 'team-a',
      parent: 'small',
      model: 'H100',
      nominal_cards: 5,
    });
    expect(err.code).toBe('INVALID_INPUT');
    expect(f.deps.store.accounts.get('team-a')?.parent).toBe('org');
    expect(f.deps.store.accounts.modelQuotas().find((q) => q.account === 'team-a')?.nominal_cards).toBe(4);
    // Lowering it to fit in the same call is allowed only if the stored share fits first (checked
    // before the change, conservatively): the stored 4 does not fit small's 2, so it is refused too.
    const lower = await refused('set_account', {
      name: 'team-a',
      parent: 'small',
      model: 'H100',
      nominal_cards: 1,
    });
    expect(lower.code).toBe('INVALID_INPUT');
    // Lower first, then move: both accepted.
    await f.invoke(ops, 'set_account', {
      name: 'team-a',
      model: 'H100',
      nominal_cards: 1,
      idempotency_key: key(),
    });
    await f.invoke(ops, 'set_account', { name: 'team-a', parent: 'small', idempotency_key: key() });
    expect(f.deps.store.accounts.get('team-a')?.parent).toBe('small');
  });
});
