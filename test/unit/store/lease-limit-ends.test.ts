import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TaskSpec } from '../../../src/contracts/task-spec.js';
import { Store } from '../../../src/store/store.js';
import type { TaskRecord } from '../../../src/store/tasks-repo.js';

/**
 * ADR 0049: each live lease card's `limit_ends_at` (its task's started_at + time_limit_seconds) is what
 * backfill's promises rest on. A task not started, or requeued after a preemption (a requeue clears
 * started_at), promises nothing: its end is null, never the first run's start plus its limit.
 */

let store: Store;
beforeEach(() => {
  store = Store.open(':memory:');
  store.principals.insert({
    id: 'prin_a',
    name: 'a',
    roles: ['submitter'],
    worker_id: null,
    created_at: 1,
    token_hash: 'f'.repeat(64),
  });
  store.proposals.insert({
    id: 'prop_1',
    owner_id: 'prin_a',
    state: 'IN_REVIEW',
    current_revision_id: 'rev_1',
    task_id: null,
    created_at: 1,
    updated_at: 1,
    expires_at: 10,
  });
  store.proposals.insertRevision({
    id: 'rev_1',
    proposal_id: 'prop_1',
    number: 1,
    spec: { title: 't' } as TaskSpec,
    digest: 'd'.repeat(64),
    findings: [],
    created_by: 'prin_a',
    created_at: 1,
    confirmed_at: 1,
  });
});
afterEach(() => store.close());

function task(over: Partial<TaskRecord>): TaskRecord {
  return {
    id: 'task_1',
    proposal_id: 'prop_1',
    revision_id: 'rev_1',
    owner_id: 'prin_a',
    spec: { title: 'T', cards: { count: 1 }, time_limit_seconds: 600 } as TaskSpec,
    spec_digest: 'd'.repeat(64),
    priority: 0,
    state: 'RUNNING',
    desired: 'run',
    reason: null,
    failure_reason: null,
    exit_code: null,
    signal: null,
    approved_at: 1,
    created_at: 1,
    updated_at: 1,
    started_at: 10_000,
    finished_at: null,
    ...over,
  };
}

function lease(id: string, state: 'ACTIVE' | 'RELEASING', epoch: number) {
  store.leases.insertLease({
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
  });
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
});
