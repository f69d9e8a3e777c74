import { BrokerError } from '../../contracts/errors.js';
import { GET_REVISION_UNTRUSTED, REVIEW_QUEUE_UNTRUSTED } from '../../contracts/untrusted.js';
import { REVIEW_DECISIONS, type ReviewDecision } from '../../domain/machines/proposal.js';
import { resolveLimits } from '../../domain/policy/task-limits.js';
import { tokenLeakIn } from '../../domain/policy/token-leak.js';
import type { Principal } from '../../store/principals-repo.js';
import type { ProposalRecord, RevisionRecord } from '../../store/proposals-repo.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { moveProposal } from '../machines/proposal.js';
import { recordReviewDecision } from '../review-decisions.js';
import { QUEUE_TOPIC, TASKS_TOPIC, taskTopic } from '../topics.js';
import { assertAgentMayApprove, decisionKindOf, needsPersonOf } from './agent-review.js';
import { loadVisibleProposal } from './proposals.js';
import { reviewQueuePage } from './review-queue.js';
import { diffBaseOf, diffInputs, diffShareOf, specChanges } from './revision-diff.js';
import { iso, principalName, reviewView, sandboxOf } from './views.js';

/** Use cases of reviewers: the review queue, reading one revision with its diff, and deciding. */

/** list_review_queue: proposals IN_REVIEW, owners in turn (review-queue.ts), oldest first in a turn. */
export function listReviewQueue(
  deps: BrokerDeps,
  principal: Principal,
  q: { limit?: number | undefined; cursor?: string | undefined },
) {
  const { page, next_cursor } = reviewQueuePage(deps, q);
  return {
    items: page.map((p) => {
      // The head only (SQLite's JSON functions): no spec parsed in JavaScript per item (docs/performance.md "Noisy neighbours").
      const r = deps.store.proposals.revisionHead(p.current_revision_id)!;
      return {
        proposal_id: p.id,
        revision_id: r.id,
        revision_number: r.number,
        digest: r.digest,
        title: r.title,
        owner: principalName(deps.store, p.owner_id),
        cards: r.cards,
        sandbox: {
          runtime: r.runtime_kind,
          image: r.runtime_kind === 'container' ? r.image : null,
          network: r.network ?? 'none',
          limits: resolveLimits(
            {
              cards: { count: r.cards },
              limits: r.limits_json === null ? undefined : JSON.parse(r.limits_json),
            },
            deps.config.policy,
          ),
        },
        confirmed_at: iso(r.confirmed_at ?? p.updated_at),
        errors: r.errors,
        warnings: r.warnings,
        own: p.owner_id === principal.id,
        needs_person: needsPersonOf(deps, r.id),
      };
    }),
    next_cursor,
    untrusted_fields: [...REVIEW_QUEUE_UNTRUSTED],
  };
}

/**
 * get_revision: one revision, its findings, and its changes against its diff base — the latest earlier
 * revision a person decided on, or nothing (src/domain/review/diff-base.ts) — with who decided it, and the
 * revisions in between that no person read (undecided, or decided only by an agent reviewer or a grant,
 * each with that decision). `untrusted_fields` names what the submitter (or another principal) wrote.
 */
export async function getRevision(
  deps: BrokerDeps,
  principal: Principal,
  proposalId: string,
  revisionId: string,
  diffLines = DEFAULT_DIFF_LINES,
  diffPage: { path?: string | undefined; offset?: number | undefined } = {},
  signal?: AbortSignal,
) {
  const p = loadVisibleProposal(deps, principal, proposalId);
  const r = deps.store.proposals.revision(revisionId);
  if (!r || r.proposal_id !== p.id)
    throw new BrokerError(
      'NOT_FOUND',
      `no revision ${revisionId} in proposal ${proposalId}`,
      'get_proposal lists the current revision.',
    );
  const { base, unreviewed_between } = diffBaseOf(deps, r);
  const baseRevision = base ? (deps.store.proposals.revision(base.revision_id) ?? null) : null;
  // Read before the diff yields to the event loop: the rest of the answer is from one moment.
  const reviews = deps.store.proposals.reviews(p.id).map((rv) => reviewView(deps.store, rv));
  // The reader's own lane (docs/performance.md "Noisy neighbours"): its concurrent calls beyond its share wait behind each other.
  // A call still waiting when its client goes away leaves the queue without running.
  const inputChanges = await diffShareOf(deps).run(
    principal.id,
    () =>
      diffInputs(deps, p.owner_id, baseRevision?.spec.inputs ?? [], r.spec.inputs ?? [], diffLines, diffPage),
    signal,
  );
  return {
    proposal_id: p.id,
    proposal_state: p.state,
    owner: principalName(deps.store, p.owner_id),
    revision: {
      revision_id: r.id,
      number: r.number,
      digest: r.digest,
      spec: r.spec,
      sandbox: sandboxOf(r.spec, deps.config.policy),
      findings: r.findings,
      created_at: iso(r.created_at),
      confirmed_at: iso(r.confirmed_at),
      current: r.id === p.current_revision_id,
    },
    diff_base: base,
    unreviewed_between,
    /** Kept for older clients: the diff base without its decision (no longer always revision N−1). */
    previous: base ? { revision_id: base.revision_id, number: base.number, digest: base.digest } : null,
    diff: specChanges(baseRevision, r),
    inputs: r.spec.inputs ?? [],
    input_changes: inputChanges,
    reviews,
    untrusted_fields: [...GET_REVISION_UNTRUSTED],
  };
}

/** Lines of unified diff get_revision shows per file unless asked for more. */
const DEFAULT_DIFF_LINES = 400;

/** What submit_review takes. */
interface ReviewInput {
  proposal_id: string;
  revision_id: string;
  revision_digest?: string | undefined;
  decision: ReviewDecision;
  comments: string;
}

/**
 * The proposal and revision a review judges, once the guards pass, in this order: visible, not the
 * principal's own, the revision belongs to it, the proposal is IN_REVIEW, the revision is the confirmed
 * current one, and its digest is the one the reviewer read (when given).
 */
function judgedRevision(
  deps: BrokerDeps,
  principal: Principal,
  input: ReviewInput,
): { p: ProposalRecord; r: RevisionRecord } {
  const p = loadVisibleProposal(deps, principal, input.proposal_id);
  // Independence first: whatever else is wrong, a proposer never judges its own proposal.
  if (p.owner_id === principal.id)
    throw new BrokerError(
      'SELF_REVIEW_FORBIDDEN',
      'you submitted this proposal and may not review it',
      'Ask another reviewer; independence is the point of review.',
    );
  const r = deps.store.proposals.revision(input.revision_id);
  if (!r || r.proposal_id !== p.id)
    throw new BrokerError(
      'NOT_FOUND',
      `no revision ${input.revision_id} in proposal ${p.id}`,
      'Use list_review_queue.',
    );
  if (p.state !== 'IN_REVIEW')
    throw new BrokerError(
      'INVALID_STATE',
      `proposal ${p.id} is ${p.state}, not IN_REVIEW`,
      'Only proposals in review can be judged.',
      { state: p.state },
    );
  if (r.id !== p.current_revision_id || r.confirmed_at === null)
    throw new BrokerError(
      'STALE_REVISION',
      `revision ${r.id} is not the revision under review`,
      `Judge the current revision ${p.current_revision_id} (get_revision shows it).`,
      { current_revision_id: p.current_revision_id },
    );
  if (input.revision_digest !== undefined && input.revision_digest !== r.digest)
    throw new BrokerError(
      'STALE_REVISION',
      'revision_digest does not match the revision',
      'Read the revision again with get_revision.',
    );
  return { p, r };
}

/**
 * The task an approval creates, QUEUED, with its audit row and (after commit) its notifications;
 * QUOTA_EXCEEDED when the owner already has the most queued tasks the config allows. Returns its id.
 */
export function createApprovedTask(
  deps: BrokerDeps,
  principal: Principal,
  p: ProposalRecord,
  r: RevisionRecord,
  now: number,
): string {
  const limit = deps.config.scheduling.max_queued_tasks_per_owner;
  if (limit !== null && deps.store.tasks.countQueuedByOwner(p.owner_id) >= limit)
    throw new BrokerError(
      'QUOTA_EXCEEDED',
      `the owner already has ${limit} queued task(s)`,
      'Approve again once some of them have run.',
    );
  const taskId = deps.ids('task');
  const task: TaskRecord = {
    id: taskId,
    proposal_id: p.id,
    revision_id: r.id,
    owner_id: p.owner_id,
    spec: r.spec,
    spec_digest: r.digest,
    priority: r.spec.priority ?? 0,
    state: 'QUEUED',
    desired: 'run',
    reason: { code: 'pending_scheduling', message: 'waiting for the scheduler' },
    failure_reason: null,
    exit_code: null,
    signal: null,
    approved_at: now,
    created_at: now,
    updated_at: now,
    started_at: null,
    finished_at: null,
  };
  deps.store.tasks.insert(task);
  deps.store.audit.append({
    at: now,
    actor: principal.name,
    action: 'task.created',
    subject_type: 'task',
    subject_id: taskId,
    data: { proposal_id: p.id, revision_id: r.id, spec_digest: r.digest, state: 'QUEUED' },
  });
  deps.store.afterCommit(() => {
    deps.notifier.notify(taskTopic(taskId));
    deps.notifier.notify(TASKS_TOPIC);
    deps.notifier.notify(QUEUE_TOPIC);
  });
  return taskId;
}

/** submit_review: judge one exact revision. APPROVE creates the task in QUEUED. Call inside a transaction. */
export function submitReview(deps: BrokerDeps, principal: Principal, input: ReviewInput) {
  // The submitter reads every comment: none may hand over a token, whoever wrote it (ADR 0041:
  // an agent reviewer's model may have been steered into finding one).
  const leak = tokenLeakIn(input.comments);
  if (leak !== null)
    throw new BrokerError(
      'INVALID_INPUT',
      `the comment holds ${leak} (gpb_…); comments are shown to the submitter`,
      'Remove it and submit again; if it was a real token, revoke it (gpu-broker token revoke NAME).',
    );
  const { p, r } = judgedRevision(deps, principal, input);
  // Agent reviewers approve only within the operator's ceiling (ADR 0027): NEEDS_PERSON otherwise.
  if (input.decision === 'APPROVE') assertAgentMayApprove(deps, principal, p, r);
  const now = deps.clock.now();
  const reviewId = deps.ids('rvw');
  deps.store.proposals.insertReview({
    id: reviewId,
    proposal_id: p.id,
    revision_id: r.id,
    revision_digest: r.digest,
    reviewer_id: principal.id,
    decision: input.decision,
    comments: input.comments,
    created_at: now,
  });
  recordReviewDecision(deps, decisionKindOf(principal), input.decision, r.confirmed_at);
  const taskId = input.decision === 'APPROVE' ? createApprovedTask(deps, principal, p, r, now) : null;
  const next = moveProposal(
    deps,
    p,
    REVIEW_DECISIONS[input.decision],
    principal.name,
    taskId ? { task_id: taskId } : {},
    {
      review_id: reviewId,
      revision_id: r.id,
      digest: r.digest,
      decision: input.decision,
    },
  );
  return {
    review_id: reviewId,
    proposal_id: p.id,
    revision_id: r.id,
    decision: input.decision,
    state: next.state,
    task_id: taskId,
  };
}
