import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ModelQuotaRecord } from '../../../src/store/accounts-repo.js';
import { Store } from '../../../src/store/store.js';

/** Quotas per account and card model (migration 024, ADR 0048): the repository and the table's checks. */

let store: Store;
beforeEach(() => {
  store = Store.open(':memory:');
  store.accounts.insert({
    name: 'team-a',
    parent: 'root',
    weight: 1,
    description: null,
    created_at: 1,
    nominal_cards: null,
    borrowing_limit: null,
    budget_card_hours: null,
    budget_period: null,
    max_priority: null,
    preemptible: 0,
  });
});
afterEach(() => store.close());

const quota = (over: Partial<ModelQuotaRecord> = {}): ModelQuotaRecord => ({
  account: 'team-a',
  model_key: 'h100',
  model: 'H100',
  nominal_cards: 4,
  borrowing_limit: 2,
  budget_card_hours: null,
  budget_period: null,
  ...over,
});

describe('account model quotas', () => {
  it('writes, replaces by key and deletes one quota per account and model', () => {
    store.accounts.putModelQuota(quota());
    store.accounts.putModelQuota(quota({ model_key: 'a100', model: 'A100', nominal_cards: 2 }));
    store.accounts.putModelQuota(quota({ model: 'h100', nominal_cards: 6, borrowing_limit: null }));
    expect(store.accounts.modelQuotas()).toEqual([
      quota({ model_key: 'a100', model: 'A100', nominal_cards: 2 }),
      quota({ model: 'h100', nominal_cards: 6, borrowing_limit: null }),
    ]);
    store.accounts.deleteModelQuota('team-a', 'a100');
    store.accounts.deleteModelQuota('team-a', 'v100');
    expect(store.accounts.modelQuotas().map((q) => q.model_key)).toEqual(['h100']);
  });

  it('goes with its account', () => {
    store.accounts.putModelQuota(quota());
    store.accounts.delete('team-a');
    expect(store.accounts.modelQuotas()).toEqual([]);
  });

  it('the table refuses what the use case refuses first (a second line of defence)', () => {
    const bad: Array<Partial<ModelQuotaRecord>> = [
      { account: 'nobody' },
      { model_key: '' },
      { model: 'x'.repeat(65) },
      { nominal_cards: -1 },
      { borrowing_limit: 100_001 },
      { nominal_cards: null, borrowing_limit: 2 },
      { budget_card_hours: 10 },
      { budget_card_hours: 0, budget_period: 'week' },
      { budget_card_hours: 10, budget_period: 'year' as 'week' },
      { nominal_cards: null, borrowing_limit: null },
    ];
    for (const over of bad) expect(() => store.accounts.putModelQuota(quota(over))).toThrow();
    expect(store.accounts.modelQuotas()).toEqual([]);
  });
});
