import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BrokerError } from '../../../../src/contracts/errors.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';

/**
 * Quotas per account and card model over the tools MCP and REST share (set_account / create_account
 * with `model`, ADR 0048): what an operator sets is shown by list_accounts; every bad input is a typed
 * error with a hint, and nothing changes (no quota, no audit row).
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
  await f.invoke(ops, 'create_account', { name: 'team-a', parent: 'org', idempotency_key: key() });
});
afterEach(() => f.close());

type Listed = { accounts: Array<{ name: string; model_quotas: unknown[] }> };

describe('model quotas over set_account', () => {
  it('sets one model’s quota beside the account-wide one; list_accounts shows it', async () => {
    await f.invoke(ops, 'set_account', {
      name: 'team-a',
      model: 'H100',
      nominal_cards: 4,
      borrowing_limit: 2,
      budget_card_hours: 100,
      budget_period: 'week',
      idempotency_key: key(),
    });
    const list = (await f.invoke(ops, 'list_accounts', {})) as Listed;
    expect(list.accounts.find((a) => a.name === 'team-a')?.model_quotas).toEqual([
      { model: 'H100', nominal_cards: 4, borrowing_limit: 2, budget_card_hours: 100, budget_period: 'week' },
    ]);
    expect(list.accounts.find((a) => a.name === 'org')?.model_quotas).toEqual([
      {
        model: 'H100',
        nominal_cards: 8,
        borrowing_limit: null,
        budget_card_hours: null,
        budget_period: null,
      },
    ]);
    // A budget cleared takes its period with it.
    await f.invoke(ops, 'set_account', {
      name: 'team-a',
      model: 'h100',
      budget_card_hours: null,
      idempotency_key: key(),
    });
    const after = (await f.invoke(ops, 'list_accounts', {})) as Listed;
    expect(after.accounts.find((a) => a.name === 'team-a')?.model_quotas).toEqual([
      { model: 'h100', nominal_cards: 4, borrowing_limit: 2, budget_card_hours: null, budget_period: null },
    ]);
  });

  it('refuses bad input, typed with a hint, and changes nothing', async () => {
    await f.invoke(ops, 'set_account', {
      name: 'team-a',
      model: 'H100',
      nominal_cards: 4,
      idempotency_key: key(),
    });
    const quotas = f.deps.store.accounts.modelQuotas();
    const audit = f.deps.store.db.prepare('SELECT count(*) AS n FROM audit_events').get();
    const attempts: Array<Record<string, unknown>> = [
      { name: 'team-a', model: '', nominal_cards: 1 },
      { name: 'team-a', model: '   ', nominal_cards: 1 },
      { name: 'team-a', model: 'x'.repeat(65), nominal_cards: 1 },
      { name: 'team-a', model: 'H100\u0000', nominal_cards: 1 },
      { name: 'team-a', model: '<script>', nominal_cards: 1 },
      { name: 'team-a', model: 'H100', nominal_cards: -1 },
      { name: 'team-a', model: 'H100', nominal_cards: 1e9 },
      { name: 'team-a', model: 'H100', nominal_cards: 2.5 },
      { name: 'team-a', model: 'H100', borrowing_limit: -3 },
      { name: 'team-a', model: 'A100', borrowing_limit: 2 }, // no nominal to borrow beyond
      { name: 'team-a', model: 'A100', budget_period: 'week' }, // a period without its budget
      { name: 'team-a', model: 'A100', budget_card_hours: 0, budget_period: 'week' },
      { name: 'team-a', model: 'H100', nominal_cards: 9 }, // past org's 8 H100
      { name: 'org', model: 'H100', nominal_cards: 3 }, // below team-a's 4 H100
      { name: 'nobody', model: 'H100', nominal_cards: 1 },
      { name: 'org', parent: 'team-a', model: 'H100', nominal_cards: 8 }, // a cycle
    ];
    for (const input of attempts) {
      const err = (await f
        .invoke(ops, 'set_account', { ...input, idempotency_key: key() })
        .catch((e: unknown) => e)) as BrokerError;
      expect(['INVALID_INPUT', 'NOT_FOUND'], JSON.stringify(input)).toContain(err.code);
      expect(err.hint, JSON.stringify(input)).toBeTruthy();
    }
    // A new child whose H100 share would push org's children past 8.
    const child = (await f
      .invoke(ops, 'create_account', {
        name: 'team-b',
        parent: 'org',
        model: 'H100',
        nominal_cards: 5,
        idempotency_key: key(),
      })
      .catch((e: unknown) => e)) as BrokerError;
    expect(child.code).toBe('INVALID_INPUT');
    expect(f.deps.store.accounts.get('team-b')).toBeUndefined();
    // Moving an account under a parent whose H100 share its own would exceed.
    await f.invoke(ops, 'create_account', {
      name: 'small',
      model: 'H100',
      nominal_cards: 1,
      idempotency_key: key(),
    });
    const move = (await f
      .invoke(ops, 'set_account', { name: 'team-a', parent: 'small', idempotency_key: key() })
      .catch((e: unknown) => e)) as BrokerError;
    expect(move.code).toBe('INVALID_INPUT');
    expect(f.deps.store.accounts.get('team-a')?.parent).toBe('org');
    expect(f.deps.store.accounts.modelQuotas().filter((q) => q.account !== 'small')).toEqual(quotas);
    const auditAfter = f.deps.store.db.prepare('SELECT count(*) AS n FROM audit_events').get() as {
      n: number;
    };
    // Only `small`'s creation was written.
    expect(auditAfter.n).toBe((audit as { n: number }).n + 1);
  });
});
