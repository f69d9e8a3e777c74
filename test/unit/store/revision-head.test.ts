import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TaskSpec } from '../../../src/contracts/task-spec.js';
import type { Finding } from '../../../src/domain/policy/evaluate.js';
import { Store } from '../../../src/store/store.js';

/** Listings read a revision's head with SQLite's JSON functions (docs/performance.md "Noisy neighbours"): the same values as the spec. */

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
    state: 'DRAFT',
    current_revision_id: 'rev_1',
    task_id: null,
    created_at: 1,
    updated_at: 1,
    expires_at: 10,
  });
});
afterEach(() => store.close());

function insert(spec: Partial<TaskSpec>, findings: Array<Pick<Finding, 'severity'>>): void {
  store.proposals.insertRevision({
    id: 'rev_1',
    proposal_id: 'prop_1',
    number: 1,
    spec: { title: 'T "quoted" é', cards: { count: 3 }, ...spec } as TaskSpec,
    digest: 'd'.repeat(64),
    findings: findings as Finding[],
    created_by: 'prin_a',
    created_at: 1,
    confirmed_at: null,
  });
}

describe('revisionHead', () => {
  it('reads title, cards, sandbox and finding counts without the spec', () => {
    insert(
      {
        runtime: { kind: 'container', image: 'img@sha256:' + 'a'.repeat(64), argv: ['x'] },
        network: 'host',
        limits: { memory_mib: 512 },
      } as Partial<TaskSpec>,
      [
        { severity: 'error' },
        { severity: 'warning' },
        { severity: 'warning' },
        { severity: 'info' } as never,
      ],
    );
    expect(store.proposals.revisionHead('rev_1')).toEqual({
      id: 'rev_1',
      number: 1,
      digest: 'd'.repeat(64),
      confirmed_at: null,
      title: 'T "quoted" é',
      cards: 3,
      runtime_kind: 'container',
      image: `img@sha256:${'a'.repeat(64)}`,
      network: 'host',
      limits_json: '{"memory_mib":512}',
      errors: 1,
      warnings: 2,
    });
  });

  it('a process spec without network has no image and a null network', () => {
    insert({ runtime: { kind: 'process', argv: ['/bin/true'] } } as Partial<TaskSpec>, []);
    expect(store.proposals.revisionHead('rev_1')).toMatchObject({
      runtime_kind: 'process',
      image: null,
      network: null,
      limits_json: null,
      errors: 0,
      warnings: 0,
    });
    expect(store.proposals.revisionHead('rev_nope')).toBeUndefined();
  });
});
