import { BrokerError } from '../../contracts/errors.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import { ceilingFacts, firstCeilingFailure, readableFacts } from '../../domain/review/agent-ceiling.js';
import type { Principal } from '../../store/principals-repo.js';
import type { ProposalRecord, RevisionRecord } from '../../store/proposals-repo.js';
import type { BrokerDeps } from '../deps.js';
import type { DecisionKind } from '../review-decisions.js';
import { verifiedBlob } from '../verified-blob.js';
import { isText } from './inputs.js';

/**
 * Agent reviewers (docs/decisions/0027-agent-reviewer.md): principals holding the
 * `agent_reviewer` role may REQUEST_CHANGES or REJECT anything they may read, but APPROVE only what the
 * operator's ceiling (config `review.agent_ceiling`) and the broker's own findings allow. Above it the
 * approval is refused with NEEDS_PERSON, nothing of the review is written, and the revision is flagged
 * for a person (review_escalations + a `review.escalated` audit row, both kept although the call fails).
 */

/** True for an agent reviewer's token. */
export function isAgentReviewer(p: Pick<Principal, 'roles'>): boolean {
  return p.roles.includes('agent_reviewer');
}

/** Which kind of decision a reviewer's review is, for the metrics. */
export function decisionKindOf(p: Pick<Principal, 'roles'>): DecisionKind {
  return isAgentReviewer(p) ? 'agent_reviewer' : 'person';
}

/**
 * The first ceiling clause revision `r` of `p` fails for an agent reviewer, or null. Computed afresh on
 * every call (get_review_prompt, submit_review) from the stored spec, findings and blobs.
 */
export function agentCeilingFailure(deps: BrokerDeps, p: ProposalRecord, r: RevisionRecord) {
  const owner = deps.store.principals.findById(p.owner_id);
  const facts = ceilingFacts(
    r.spec,
    r.findings,
    deps.config.policy,
    owner ? isAgentReviewer(owner) : true,
    readableOf(deps, p.owner_id, r.spec),
  );
  return firstCeilingFailure(facts, deps.config.review.agent_ceiling);
}

/**
 * The `readable` fact: each input within the prompt budget read (re-hashed) and tested as get_review_prompt
 * tests it. A blob the owner no longer holds counts as not text: nobody can show it.
 */
function readableOf(deps: BrokerDeps, ownerId: string, spec: TaskSpec) {
  return readableFacts(spec, (sha256) => {
    try {
      return isText(verifiedBlob(deps, ownerId, sha256));
    } catch (e) {
      if (e instanceof BrokerError && e.code === 'NOT_FOUND') return false;
      throw e;
    }
  });
}

/**
 * Refuses an agent reviewer's APPROVE above the ceiling: throws NEEDS_PERSON naming the first failing
 * clause, after registering the flag and audit row to be written once the refused call rolls back.
 * A person's approval, and every REQUEST_CHANGES or REJECT, pass untouched.
 */
export function assertAgentMayApprove(
  deps: BrokerDeps,
  principal: Principal,
  p: ProposalRecord,
  r: RevisionRecord,
): void {
  if (!isAgentReviewer(principal)) return;
  const failure = agentCeilingFailure(deps, p, r);
  if (failure === null) return;
  const at = deps.clock.now();
  deps.store.afterOutermost(() => {
    deps.store.escalations.flag({
      revision_id: r.id,
      proposal_id: p.id,
      reviewer_id: principal.id,
      clause: failure.clause,
      reason: failure.reason,
      at,
    });
    deps.store.audit.append({
      at,
      actor: principal.name,
      action: 'review.escalated',
      subject_type: 'proposal',
      subject_id: p.id,
      data: { revision_id: r.id, digest: r.digest, clause: failure.clause, reason: failure.reason },
    });
  });
  throw new BrokerError(
    'NEEDS_PERSON',
    `an agent reviewer may not approve this revision: ${failure.reason}`,
    'It stays IN_REVIEW, flagged for a person. You may still REQUEST_CHANGES or REJECT it.',
    { clause: failure.clause, reason: failure.reason, revision_id: r.id },
  );
}

/** The `needs_person` field of a review queue item: the latest refusal of an agent's approval. */
export function needsPersonOf(deps: BrokerDeps, revisionId: string) {
  const e = deps.store.escalations.get(revisionId);
  if (!e) return null;
  const by = deps.store.principals.findById(e.reviewer_id)?.name ?? 'unknown';
  return { by, clause: e.clause, reason: e.reason, attempts: e.attempts, at: new Date(e.at).toISOString() };
}
