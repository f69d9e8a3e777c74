import type { TaskSpec } from '../../src/contracts/task-spec.js';
import { Store } from '../../src/store/store.js';
import type { TaskRecord } from '../../src/store/tasks-repo.js';

/**
 * A store on `:memory:` holding what a task row needs above it (principal `prin_a`, proposal `prop_1` in
 * review, revision `rev_1`), for store tests that insert tasks directly; and such a task's record.
 */
export function storeWithRevision(): Store {
  const store = Store.open(':memory:');
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
  return store;
}

/** A QUEUED task `task_1` of that revision with a 1-card spec, `spec` and `over` last. */
export function seededTask(spec: Partial<TaskSpec> = {}, over: Partial<TaskRecord> = {}): TaskRecord {
  return {
    id: 'task_1',
    proposal_id: 'prop_1',
    revision_id: 'rev_1',
    owner_id: 'prin_a',
    spec: { title: 'T', cards: { count: 1 }, ...spec } as TaskSpec,
    spec_digest: 'd'.repeat(64),
    priority: 0,
    state: 'QUEUED',
    desired: 'run',
    reason: { code: 'pending_scheduling', message: 'waiting' },
    failure_reason: null,
    exit_code: null,
    signal: null,
    approved_at: 1,
    created_at: 1,
    updated_at: 1,
    started_at: null,
    finished_at: null,
    ...over,
  };
}
