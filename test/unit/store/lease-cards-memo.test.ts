import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LeaseRecord } from '../../../src/store/leases-repo.js';
import type { Store } from '../../../src/store/store.js';
import { statementCalls } from '../../support/statement-calls.js';
import { seededTask, storeWithRevision } from '../../support/store-seed.js';

/**
 * A lease's cards never change once inserted, so LeasesRepo reads them once per lease (a report read them
 * two to four times per task): each caller still gets an array of its own, a released lease keeps its
 * cards, and a lease that is gone (pruned, or its insert rolled back) is not answered from memory.
 */

let store: Store;
beforeEach(() => {
  store = storeWithRevision();
  store.tasks.insert(seededTask({}, { state: 'ASSIGNED', reason: null }));
});
afterEach(() => store.close());

function lease(id: string): LeaseRecord {
  return {
    id,
    task_id: 'task_1',
    worker_id: 'w1',
    lease_epoch: 1,
    state: 'ACTIVE',
    reason: null,
    created_at: 5_000,
    updated_at: 5_000,
    released_at: null,
    cards: [
      { index: 3, uuid: 'GPU-3' },
      { index: 1, uuid: 'GPU-1' },
    ],
  };
}

/** Counts reads of `lease_cards` that `fn` makes. */
function cardReads(fn: () => void): number {
  return statementCalls((store.leases as unknown as { s: object }).s, 'leaseCards', 'all', fn);
}

/** Inserts lease_1 in a transaction that reads its cards and then rolls back. */
function insertRolledBack(): void {
  expect(() =>
    store.transaction(() => {
      store.leases.insertLease(lease('lease_1'));
      expect(store.leases.lease('lease_1')?.cards).toHaveLength(2);
      throw new Error('refused');
    }),
  ).toThrow('refused');
}

describe('a lease’s cards read once', () => {
  it('reads the cards of a lease once, and hands each caller an array of its own', () => {
    store.leases.insertLease(lease('lease_1'));
    let first: LeaseRecord | undefined;
    expect(
      cardReads(() => {
        first = store.leases.lease('lease_1');
        store.leases.lease('lease_1');
        store.leases.latestLeaseForTask('task_1');
        store.leases.liveLeases();
      }),
    ).toBe(1);
    expect(first?.cards).toEqual([
      { index: 1, uuid: 'GPU-1' },
      { index: 3, uuid: 'GPU-3' },
    ]);
    first!.cards.pop();
    expect(store.leases.lease('lease_1')?.cards).toHaveLength(2);
    expect(() => {
      (first!.cards[0] as { index: number }).index = 9;
    }).toThrow(TypeError);
  });

  it('keeps the cards of a released lease, and answers nothing for a lease that is gone', () => {
    store.leases.insertLease(lease('lease_1'));
    store.leases.lease('lease_1');
    store.leases.updateLease({ ...lease('lease_1'), state: 'RELEASED', released_at: 6_000 }, 'ACTIVE');
    expect(store.leases.lease('lease_1')?.cards.map((c) => c.index)).toEqual([1, 3]);
    store.db.prepare('DELETE FROM lease_cards WHERE lease_id = ?').run('lease_1');
    store.db.prepare('DELETE FROM leases WHERE id = ?').run('lease_1');
    expect(store.leases.lease('lease_1')).toBeUndefined();
  });

  it('does not remember an insert that rolled back', () => {
    insertRolledBack();
    expect(store.leases.lease('lease_1')).toBeUndefined();
  });

  it('answers the cards inserted last for a lease id whose earlier insert rolled back', () => {
    insertRolledBack();
    store.leases.insertLease({ ...lease('lease_1'), cards: [{ index: 0, uuid: 'GPU-0' }] });
    expect(store.leases.lease('lease_1')?.cards).toEqual([{ index: 0, uuid: 'GPU-0' }]);
  });
});
