import { BrokerError } from '../../contracts/errors.js';
import { inputInterpreters } from '../../contracts/policy.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import { type Coverage, coverage } from '../../domain/grants/coverage.js';
import { reservationOf } from '../../domain/grants/grant.js';
import { resolveLimits } from '../../domain/policy/task-limits.js';
import type { Finding } from '../../domain/policy/types.js';
import type { GrantRecord } from '../../store/grants-repo.js';
import type { Principal } from '../../store/principals-repo.js';
import type { ProposalRecord, RevisionRecord } from '../../store/proposals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { moveProposal } from '../machines/proposal.js';
import { updateGrantCounters } from '../machines/standing-grant.js';
import { recordReviewDecision } from '../review-decisions.js';
import { loadVisibleGrant } from './grants.js';
import { confirmRevision, findingsFor, loadVisibleProposal } from './proposals.js';
import { createApprovedTask } from './reviews.js';

/**
 * Auto-approval by standing grant (docs/decisions/0029-grants.md): at confirm_revision, in
 * the same transaction, the owner's ACTIVE grants are tried oldest first; the first that covers the
 * revision approves it (a review row naming the grant, its budget charged exactly, the task created on
 * the path a reviewer's approval takes, a `review.auto_approved` audit row with the receipt). Otherwise
 * the proposal stays IN_REVIEW and the answer names the first failing clause. Also explain_grant.
 */

/** A coverage answer as the tools show it. */
export interface CoverageView {
  covered: boolean;
  grant_id: string | null;
  failing: { clause: string; message: string } | null;
  clauses: Array<{ clause: string; message: string }>;
}

const view = (g: GrantRecord | null, c: Coverage | null): CoverageView => ({
  covered: c?.covered ?? false,
  grant_id: g?.id ?? null,
  failing: c && !c.covered ? c.failing : null,
  clauses: c?.covered ? c.clauses : [],
});

/** Whether `g` covers a spec with these findings now. */
export function grantCoverage(
  deps: BrokerDeps,
  g: GrantRecord,
  candidate: { spec: TaskSpec; findings: readonly Finding[] },
): Coverage {
  const base = deps.store.proposals.revision(g.base_revision_id);
  if (!base) return { covered: false, failing: { clause: 'base', message: 'the base revision is gone' } };
  return coverage({
    grant: g,
    base: { spec: base.spec, findings: base.findings },
    spec: candidate.spec,
    findings: candidate.findings,
    limits: resolveLimits(candidate.spec, deps.config.policy),
    script_interpreters: inputInterpreters(deps.config.policy.scripts),
    now: deps.clock.now(),
  });
}

/** The budget counters, as a receipt shows them. */
const budgetOf = (g: GrantRecord) => ({
  runs_used: g.runs_used,
  max_runs: g.max_runs,
  card_seconds_charged: g.card_seconds_charged,
  card_seconds_reserved: g.card_seconds_reserved,
  max_card_seconds: g.max_card_seconds,
  running: g.running,
  concurrency: g.concurrency,
});

/**
 * Approves `r` under `g` (which covers it): charges the grant, writes the review row naming the grant,
 * creates the task, records the run and its receipt, and moves the proposal to APPROVED.
 */
function approveWithGrant(
  deps: BrokerDeps,
  principal: Principal,
  p: ProposalRecord,
  r: RevisionRecord,
  g: GrantRecord,
  clauses: Array<{ clause: string; message: string }>,
): string {
  const now = deps.clock.now();
  const reserved = reservationOf(r.spec.cards.count, r.spec.time_limit_seconds);
  const after = updateGrantCounters(deps, g, {
    runs_used: g.runs_used + 1,
    card_seconds_reserved: g.card_seconds_reserved + reserved,
    running: g.running + 1,
  });
  const approvedBy = `grant ${g.id}`;
  const reviewId = deps.ids('rvw');
  deps.store.grants.insertAutoReview({
    id: reviewId,
    proposal_id: p.id,
    revision_id: r.id,
    revision_digest: r.digest,
    reviewer_id: g.decided_by!,
    comments: `approved_by: ${approvedBy} (decided by its reviewer; every clause held)`,
    created_at: now,
    grant_id: g.id,
  });
  const taskId = createApprovedTask(deps, { ...principal, name: approvedBy }, p, r, now);
  const receipt = {
    approved_by: approvedBy,
    clauses,
    budget_before: budgetOf(g),
    budget_after: budgetOf(after),
  };
  deps.store.grants.insertRun({
    grant_id: g.id,
    task_id: taskId,
    proposal_id: p.id,
    revision_id: r.id,
    cards: r.spec.cards.count,
    card_seconds_reserved: reserved,
    receipt,
    created_at: now,
  });
  deps.store.audit.append({
    at: now,
    actor: approvedBy,
    action: 'review.auto_approved',
    subject_type: 'proposal',
    subject_id: p.id,
    data: {
      grant_id: g.id,
      revision_id: r.id,
      digest: r.digest,
      task_id: taskId,
      review_id: reviewId,
      ...receipt,
    },
  });
  recordReviewDecision(deps, 'grant', 'APPROVE', r.confirmed_at);
  moveProposal(
    deps,
    p,
    'approve',
    approvedBy,
    { task_id: taskId },
    {
      review_id: reviewId,
      revision_id: r.id,
      digest: r.digest,
      decision: 'APPROVE',
      grant_id: g.id,
    },
  );
  return taskId;
}

/**
 * Tries the owner's ACTIVE grants on a just-confirmed revision (then its SUSPENDED ones, only to say
 * so). Each attempt runs in a savepoint, so a
 * refusal on the way (the owner's queued-task quota) undoes the charge and leaves the proposal IN_REVIEW.
 */
function tryGrants(
  deps: BrokerDeps,
  principal: Principal,
  p: ProposalRecord,
  revisionId: string,
): CoverageView & { task_id: string | null } {
  let first: CoverageView | null = null;
  // Read (and its spec parsed) only when the owner has a grant to try: most confirmations have none.
  let revision: RevisionRecord | undefined;
  for (const g of deps.store.grants.liveOf(p.owner_id)) {
    revision ??= deps.store.proposals.revision(revisionId)!;
    const r = revision;
    const c = grantCoverage(deps, g, r);
    if (!c.covered) {
      first ??= view(g, c);
      continue;
    }
    try {
      const taskId = deps.store.transaction(() => approveWithGrant(deps, principal, p, r, g, c.clauses));
      return { ...view(g, c), task_id: taskId };
    } catch (err) {
      if (!(err instanceof BrokerError) || err.code !== 'QUOTA_EXCEEDED') throw err;
      first ??= view(g, { covered: false, failing: { clause: 'queue_quota', message: err.message } });
    }
  }
  return { ...(first ?? view(null, null)), task_id: null };
}

/** confirm_revision with standing grants: confirm, then let a covering grant approve it at once. */
export function confirmRevisionWithGrants(
  deps: BrokerDeps,
  principal: Principal,
  proposalId: string,
  revisionId: string,
) {
  const confirmed = confirmRevision(deps, principal, proposalId, revisionId);
  const p = deps.store.proposals.get(proposalId)!;
  const grant = tryGrants(deps, principal, p, revisionId);
  if (grant.task_id === null)
    return {
      ...confirmed,
      task_id: null,
      grant,
      next_action:
        grant.grant_id === null
          ? confirmed.next_action
          : `No grant covers it (${grant.failing?.message}); an independent reviewer must decide: call wait_for_proposal.`,
    };
  return {
    ...confirmed,
    state: 'APPROVED' as const,
    task_id: grant.task_id,
    grant,
    next_action: `Approved by grant ${grant.grant_id}: task ${grant.task_id} is queued. Call wait_for_task.`,
  };
}

/** explain_grant: would grant X (or any of the caller's ACTIVE grants) cover this revision or spec? */
export function explainGrant(
  deps: BrokerDeps,
  principal: Principal,
  q: { grant_id?: string | undefined; revision_id?: string | undefined; spec?: TaskSpec | undefined },
): { results: CoverageView[] } {
  const candidate = explainCandidate(deps, principal, q);
  const grants = q.grant_id
    ? [loadVisibleGrant(deps, principal, q.grant_id)]
    : deps.store.grants.activeOf(candidate.owner);
  return { results: grants.map((g) => view(g, grantCoverage(deps, g, candidate))) };
}

function explainCandidate(
  deps: BrokerDeps,
  principal: Principal,
  q: { revision_id?: string | undefined; spec?: TaskSpec | undefined },
): { spec: TaskSpec; findings: readonly Finding[]; owner: string } {
  if ((q.revision_id === undefined) === (q.spec === undefined))
    throw new BrokerError(
      'INVALID_INPUT',
      'give exactly one of revision_id and spec',
      'e.g. {"revision_id": "rev_…"}',
    );
  if (q.spec) return { spec: q.spec, findings: findingsFor(deps, principal.id, q.spec), owner: principal.id };
  const id = q.revision_id as string;
  // A revision the caller may not see answers exactly as one that does not exist (docs/security.md "What a reviewer must read, and what the broker guarantees"):
  // same code, same message, same hint, and never its proposal's id.
  const notFound = () => new BrokerError('NOT_FOUND', `no revision ${id}`, 'get_proposal lists yours.');
  const r = deps.store.proposals.revision(id);
  if (!r) throw notFound();
  let p: ProposalRecord;
  try {
    p = loadVisibleProposal(deps, principal, r.proposal_id);
  } catch (err) {
    if (err instanceof BrokerError && err.code === 'NOT_FOUND') throw notFound();
    throw err;
  }
  return { spec: r.spec, findings: r.findings, owner: p.owner_id };
}
