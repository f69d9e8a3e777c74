import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { expireProposals } from '../../../../src/broker/loops/sweep.js';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import { BrokerError } from '../../../../src/contracts/errors.js';
import type { ProposalView } from '../../../../src/contracts/views.js';
import { ManualClock } from '../../../../src/platform/clock.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { validSpec } from '../../../support/spec.js';

/** The expiry sweeper (docs/state-machines.md: a sweeper, not lazily) with a ManualClock. */

const TTL_S = 3600;
let f: BrokerFixture;
let clock: ManualClock;
let alice: Principal;
let rita: Principal;
let n = 0;
const key = () => `k${++n}`;

async function create(): Promise<RevisionResult> {
  return (await f.invoke(alice, 'create_proposal', {
    spec: validSpec(),
    idempotency_key: key(),
  })) as RevisionResult;
}
async function confirm(r: RevisionResult): Promise<void> {
  await f.invoke(alice, 'confirm_revision', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    idempotency_key: key(),
  });
}
async function review(r: RevisionResult, decision: string): Promise<void> {
  await f.invoke(rita, 'submit_review', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    decision,
    comments: 'checked',
    idempotency_key: key(),
  });
}
const stateOf = (id: string) => f.deps.store.proposals.get(id)?.state;

beforeEach(() => {
  clock = new ManualClock();
  f = makeBrokerDeps({ clock, config: { timing: { proposal_ttl_seconds: TTL_S } } });
  alice = f.principal('alice', ['submitter']);
  rita = f.principal('rita', ['reviewer']);
});

afterEach(() => f.close());

describe('expireProposals', () => {
  it('expires live proposals untouched for the TTL, with an audit row, and leaves decided ones alone', async () => {
    const draft = await create();
    const inReview = await create();
    await confirm(inReview);
    const changes = await create();
    await confirm(changes);
    await review(changes, 'REQUEST_CHANGES');
    const approved = await create();
    await confirm(approved);
    await review(approved, 'APPROVE');
    const cancelled = await create();
    await f.invoke(alice, 'cancel_proposal', { proposal_id: cancelled.proposal_id, idempotency_key: key() });

    clock.advance(TTL_S * 1000 - 1);
    expect(expireProposals(f.deps)).toBe(0);

    // Activity renews the TTL: a revision a minute before the deadline keeps the draft alive.
    await f.invoke(alice, 'revise_proposal', {
      proposal_id: draft.proposal_id,
      spec: validSpec(),
      idempotency_key: key(),
    });
    const auditBefore = f.deps.store.audit.verify();
    clock.advance(1);
    expect(expireProposals(f.deps)).toBe(2);
    expect(stateOf(inReview.proposal_id)).toBe('EXPIRED');
    expect(stateOf(changes.proposal_id)).toBe('EXPIRED');
    expect(stateOf(draft.proposal_id)).toBe('DRAFT');
    expect(stateOf(approved.proposal_id)).toBe('APPROVED');
    expect(stateOf(cancelled.proposal_id)).toBe('CANCELLED');
    expect(f.deps.store.proposals.get(inReview.proposal_id)?.expires_at).toBeNull();

    const rows = f.deps.store.audit.forSubject('proposal', changes.proposal_id);
    expect(rows.at(-1)).toMatchObject({
      actor: 'sweeper',
      action: 'proposal.expire',
      at: clock.now(),
      data: { from: 'CHANGES_REQUESTED', to: 'EXPIRED' },
    });
    const after = f.deps.store.audit.verify();
    expect(after.ok).toBe(true);
    expect(after.events - auditBefore.events).toBe(2);

    clock.advance(TTL_S * 1000);
    expect(expireProposals(f.deps)).toBe(1);
    expect(stateOf(draft.proposal_id)).toBe('EXPIRED');
    expect(expireProposals(f.deps)).toBe(0);
  });

  it('an expired proposal refuses every further step', async () => {
    const r = await create();
    clock.advance(TTL_S * 1000);
    expireProposals(f.deps);
    const err = await f
      .invoke(alice, 'confirm_revision', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        idempotency_key: key(),
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerError);
    expect((err as BrokerError).code).toBe('INVALID_STATE');
    const get = (await f.invoke(alice, 'get_proposal', { proposal_id: r.proposal_id })) as {
      proposal: ProposalView;
    };
    expect(get.proposal).toMatchObject({ state: 'EXPIRED', expires_at: null });
  });

  it('works in batches and wakes waiters', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push((await create()).proposal_id);
    const watched = await create();
    await confirm(watched);
    const waiting = f.invoke(alice, 'wait_for_proposal', {
      proposal_id: watched.proposal_id,
      timeout_seconds: 25,
    });
    clock.advance(TTL_S * 1000);
    expect(expireProposals(f.deps, 5)).toBe(5);
    expect(expireProposals(f.deps, 5)).toBe(3);
    expect(expireProposals(f.deps, 5)).toBe(0);
    for (const id of ids) expect(stateOf(id)).toBe('EXPIRED');
    const woke = (await waiting) as { proposal: ProposalView; timed_out: boolean };
    expect(woke.timed_out).toBe(false);
    expect(woke.proposal.state).toBe('EXPIRED');
  });
});
