import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../../src/store/store.js';
import type { TaskRecord } from '../../../src/store/tasks-repo.js';
import { seededTask, storeWithRevision } from '../../support/store-seed.js';

/**
 * ADR 0049: each live lease card's `limit_ends_at` (its task's started_at + time_limit_seconds) is what
 * backfill's promises rest on. A task not started, or requeued after a preemption (a requeue clears
 * started_at), promises nothing: its end is null, never the first run's start plus its limit.
 */

let store: Store;
beforeEach(() => {
  store = storeWithRevision();
});
afterEach(() => store.close());

function task(over: Partial<TaskRecord>): TaskRecord {
  return seededTask(
    { time_limit_seconds: 600 },
    { state: 'RUNNING', reason: null, started_at: 10_000, ...over },
  );
}

function lease(id: string, state: 'ACTIVE' | 'RELEASING', epoch: number, stopBy: number | null = null) {
  store.leases.insertLease(
    {
      id,
      task_id: 'task_1',
      worker_id: 'w1',
      lease_epoch: epoch,
      state,
      reason: null,
      created_at: 5_000,
      updated_at: 5_000,
      released_at: null,
      cards: [{ index: 0, uuid: 'GPU-0' }],
    },
    null,
    null,
    stopBy,
  );
}

describe('a live lease card’s limit end', () => {
  it('is the task’s start plus its limit while it runs', () => {
    store.tasks.insert(task({}));
    lease('lease_1', 'ACTIVE', 1);
    expect(store.leases.liveCards().map((c) => c.limit_ends_at)).toEqual([10_000 + 600_000]);
  });

  it('is null for a task not started, and for one requeued after a preemption while its lease releases', () => {
    store.tasks.insert(task({ state: 'ASSIGNED', started_at: null }));
    lease('lease_1', 'ACTIVE', 1);
    expect(store.leases.liveCards().map((c) => c.limit_ends_at)).toEqual([null]);
    // Started, then preempted: the task is QUEUED again with started_at cleared (execution-report.ts
    // PREEMPTED_REQUEUE) while its old lease is still RELEASING: no end from the first run's start.
    const t = store.tasks.get('task_1')!;
    store.tasks.update({ ...t, state: 'RUNNING', started_at: 10_000 }, 'ASSIGNED');
    expect(store.leases.liveCards().map((c) => c.limit_ends_at)).toEqual([610_000]);
    store.db.prepare("UPDATE leases SET state = 'RELEASING' WHERE id = 'lease_1'").run();
    store.tasks.update({ ...t, state: 'QUEUED', started_at: null }, 'RUNNING');
    expect(store.leases.liveCards().map((c) => [c.state, c.limit_ends_at])).toEqual([['RELEASING', null]]);
  });

  it('is a backfilled lease’s deadline before its task starts, and the earlier of the two after', () => {
    // ADR 0049 §5: the worker stops a backfilled run by `stop_by` whatever its start; so the end is known
    // even before the start, and a late start cannot push it past the deadline.
    store.tasks.insert(task({ state: 'ASSIGNED', started_at: null }));
    lease('lease_1', 'ACTIVE', 1, 500_000);
    expect(store.leases.liveCards().map((c) => c.limit_ends_at)).toEqual([500_000]);
    const t = store.tasks.get('task_1')!;
    // Started early: its own limit (10,000 + 600,000 = 610,000) comes after the deadline; the deadline holds.
    store.tasks.update({ ...t, state: 'RUNNING', started_at: 10_000 }, 'ASSIGNED');
    expect(store.leases.liveCards().map((c) => c.limit_ends_at)).toEqual([500_000]);
    store.db.prepare('UPDATE leases SET stop_by = 700000 WHERE id = ?').run('lease_1');
    expect(store.leases.liveCards().map((c) => c.limit_ends_at)).toEqual([610_000]);
  });
});
