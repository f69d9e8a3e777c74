import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expireProposals } from '../../../../src/broker/loops/sweep.js';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import { BrokerError, type ErrorCode } from '../../../../src/contracts/errors.js';
import {
  PROPOSAL_TABLE,
  type ProposalEvent,
  type ProposalState,
} from '../../../../src/domain/machines/proposal.js';
import { ManualClock } from '../../../../src/platform/clock.js';
import { makeBrokerDeps } from '../../../support/deps.js';
import { DISALLOWED_EXECUTABLE, specRunning, validSpec } from '../../../support/spec.js';

/**
 * Property: whatever the owner, a reviewer and the sweeper do, in any order, through the real use cases
 * and dispatcher on a real SQLite store, a proposal only moves along edges of the transition table, a
 * refused step changes nothing, and the stored facts stay consistent (an APPROVED proposal points at a
 * task built from its confirmed current revision, the audit chain verifies).
 */

type Action =
  | { kind: 'revise'; valid: boolean }
  | { kind: 'confirm'; which: 'current' | 'first' }
  | { kind: 'review'; decision: 'APPROVE' | 'REQUEST_CHANGES' | 'REJECT'; which: 'current' | 'first' }
  | { kind: 'cancel' }
  | { kind: 'expire' }
  | { kind: 'wait' };

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  fc.record({ kind: fc.constant('revise' as const), valid: fc.boolean() }),
  fc.record({
    kind: fc.constant('confirm' as const),
    which: fc.constantFrom('current' as const, 'first' as const),
  }),
  fc.record({
    kind: fc.constant('review' as const),
    decision: fc.constantFrom('APPROVE' as const, 'REQUEST_CHANGES' as const, 'REJECT' as const),
    which: fc.constantFrom('current' as const, 'first' as const),
  }),
  fc.record({ kind: fc.constant('cancel' as const) }),
  fc.record({ kind: fc.constant('expire' as const) }),
  fc.record({ kind: fc.constant('wait' as const) }),
);

/** The event each action asks for (null: none — reads, or refusals that never reach the machine). */
const EVENT: Record<Action['kind'], ProposalEvent | null> = {
  revise: 'revise',
  confirm: 'confirm',
  review: null,
  cancel: 'cancel',
  expire: 'expire',
  wait: null,
};
const DECISION_EVENT = { APPROVE: 'approve', REQUEST_CHANGES: 'request_changes', REJECT: 'reject' } as const;

/** Refusals a caller may legitimately get here; anything else (INTERNAL above all) is a bug. */
const EXPECTED_REFUSALS: ReadonlySet<ErrorCode> = new Set([
  'INVALID_STATE',
  'STALE_REVISION',
  'POLICY_VIOLATION',
]);

describe('proposal lifecycle through the use cases', () => {
  it('only moves along table edges, and refusals change nothing', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.boolean(),
        fc.array(actionArb, { minLength: 1, maxLength: 14 }),
        async (startValid, actions) => {
          const clock = new ManualClock();
          const f = makeBrokerDeps({ clock, config: { timing: { proposal_ttl_seconds: 60 } } });
          try {
            const owner = f.principal('owner', ['submitter']);
            const reviewer = f.principal('reviewer', ['reviewer']);
            let n = 0;
            const key = () => `k${++n}`;
            const spec = (valid: boolean) => (valid ? validSpec() : specRunning([DISALLOWED_EXECUTABLE]));
            const first = (await f.invoke(owner, 'create_proposal', {
              spec: spec(startValid),
              idempotency_key: key(),
            })) as RevisionResult;
            const pid = first.proposal_id;
            const store = f.deps.store;
            const tables = () =>
              ['proposals', 'revisions', 'reviews', 'tasks', 'audit_events'].map(
                (t) => (store.db.prepare(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n,
              );
            let transitions = 1; // proposal.created

            for (const action of actions) {
              const before = store.proposals.get(pid)!;
              const countsBefore = tables();
              const revisionId =
                'which' in action && action.which === 'first'
                  ? first.revision_id
                  : before.current_revision_id;
              let event: ProposalEvent | null = EVENT[action.kind];
              let error: unknown = null;
              try {
                switch (action.kind) {
                  case 'revise':
                    await f.invoke(owner, 'revise_proposal', {
                      proposal_id: pid,
                      spec: spec(action.valid),
                      idempotency_key: key(),
                    });
                    break;
                  case 'confirm':
                    await f.invoke(owner, 'confirm_revision', {
                      proposal_id: pid,
                      revision_id: revisionId,
                      idempotency_key: key(),
                    });
                    break;
                  case 'review':
                    event = DECISION_EVENT[action.decision];
                    await f.invoke(reviewer, 'submit_review', {
                      proposal_id: pid,
                      revision_id: revisionId,
                      decision: action.decision,
                      comments: 'c',
                      idempotency_key: key(),
                    });
                    break;
                  case 'cancel':
                    await f.invoke(owner, 'cancel_proposal', { proposal_id: pid, idempotency_key: key() });
                    break;
                  case 'expire':
                    clock.advance(60_000);
                    expireProposals(f.deps);
                    break;
                  case 'wait':
                    await f.invoke(owner, 'wait_for_proposal', { proposal_id: pid, timeout_seconds: 0 });
                    break;
                }
              } catch (err) {
                error = err;
              }
              const after = store.proposals.get(pid)!;
              if (error !== null) {
                expect(error).toBeInstanceOf(BrokerError);
                expect(EXPECTED_REFUSALS).toContain((error as BrokerError).code);
                expect(after).toEqual(before);
                expect(tables()).toEqual(countsBefore);
                continue;
              }
              if (after.state !== before.state || after.current_revision_id !== before.current_revision_id) {
                // A move happened: it must be the table's answer to this action's event.
                expect(event).not.toBeNull();
                expect(PROPOSAL_TABLE[before.state][event!]).toBe(after.state);
                transitions++;
              } else if (action.kind === 'expire') {
                // The sweeper found nothing: only a terminal proposal is not expired after its TTL.
                expect(Object.keys(PROPOSAL_TABLE[before.state])).toEqual([]);
              } else {
                expect(['wait']).toContain(action.kind);
              }
              checkInvariants(after.state);
            }
            expect(store.audit.forSubject('proposal', pid)).toHaveLength(transitions);
            expect(store.audit.verify().ok).toBe(true);

            function checkInvariants(state: ProposalState): void {
              const p = store.proposals.get(pid)!;
              const current = store.proposals.revision(p.current_revision_id)!;
              const tasks = store.db.prepare('SELECT * FROM tasks WHERE proposal_id = ?').all(pid) as Array<{
                revision_id: string;
                spec_digest: string;
              }>;
              if (state === 'IN_REVIEW' || state === 'APPROVED') expect(current.confirmed_at).not.toBeNull();
              if (state === 'APPROVED') {
                expect(tasks).toHaveLength(1);
                expect(tasks[0]).toMatchObject({ revision_id: current.id, spec_digest: current.digest });
                expect(p.task_id).not.toBeNull();
              } else expect(tasks).toHaveLength(0);
              for (const rv of store.proposals.reviews(pid)) {
                const judged = store.proposals.revision(rv.revision_id)!;
                expect(judged.confirmed_at).not.toBeNull();
                expect(rv.revision_digest).toBe(judged.digest);
              }
              // A revision with error findings is never confirmed.
              for (const r of store.proposals.revisions(pid))
                if (r.findings.some((x) => x.severity === 'error')) expect(r.confirmed_at).toBeNull();
            }
          } finally {
            f.close();
          }
        },
      ),
      { numRuns: 120 },
    );
  });
});
