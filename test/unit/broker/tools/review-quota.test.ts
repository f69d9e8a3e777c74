import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import { BrokerError } from '../../../../src/contracts/errors.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { validSpec } from '../../../support/spec.js';

/** Approval creates the task in the same transaction; a refused approval (quota) leaves no trace. */

let f: BrokerFixture;
let alice: Principal;
let rita: Principal;
let n = 0;
const key = () => `k${++n}`;

async function inReview(): Promise<RevisionResult> {
  const r = (await f.invoke(alice, 'create_proposal', {
    spec: validSpec(),
    idempotency_key: key(),
  })) as RevisionResult;
  await f.invoke(alice, 'confirm_revision', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    idempotency_key: key(),
  });
  return r;
}
const approve = (r: RevisionResult) =>
  f.invoke(rita, 'submit_review', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    decision: 'APPROVE',
    comments: 'ok',
    idempotency_key: key(),
  });

beforeEach(() => {
  f = makeBrokerDeps({ config: { scheduling: { max_queued_tasks_per_owner: 1 } } });
  alice = f.principal('alice', ['submitter']);
  rita = f.principal('rita', ['reviewer']);
});

afterEach(() => f.close());

describe('approval and the queued-task quota', () => {
  it('refuses an approval beyond the owner’s queued-task quota with QUOTA_EXCEEDED and changes nothing', async () => {
    const first = await inReview();
    const second = await inReview();
    const done = (await approve(first)) as { task_id: string; state: string };
    expect(done.state).toBe('APPROVED');
    expect(f.deps.store.tasks.get(done.task_id)).toMatchObject({
      state: 'QUEUED',
      revision_id: first.revision_id,
    });

    const before = f.deps.store.audit.verify();
    const err = await approve(second).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerError);
    expect((err as BrokerError).code).toBe('QUOTA_EXCEEDED');
    expect((err as BrokerError).retryable).toBe(true);
    expect(f.deps.store.proposals.get(second.proposal_id)).toMatchObject({
      state: 'IN_REVIEW',
      task_id: null,
    });
    expect(f.deps.store.proposals.reviews(second.proposal_id)).toEqual([]);
    expect(f.deps.store.audit.verify()).toEqual(before);
    // Request changes is not limited by the quota.
    await f.invoke(rita, 'submit_review', {
      proposal_id: second.proposal_id,
      revision_id: second.revision_id,
      decision: 'REQUEST_CHANGES',
      comments: 'later',
      idempotency_key: key(),
    });
    expect(f.deps.store.proposals.get(second.proposal_id)?.state).toBe('CHANGES_REQUESTED');
  });
});
