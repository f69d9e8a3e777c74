import type { Policy } from '../../contracts/policy.js';
import { cardLabel } from '../../contracts/sample.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import type {
  ProposalSummary,
  ProposalView,
  SandboxSummary,
  TaskSummary,
  TaskView,
} from '../../contracts/views.js';
import type { SlurmJobReport } from '../../contracts/worker-protocol.js';
import { isSettledTask, WORKER_UNREACHABLE } from '../../domain/machines/task.js';
import { isConfirmable } from '../../domain/policy/evaluate.js';
import { resolveLimits } from '../../domain/policy/task-limits.js';
import type { ProposalRecord, ReviewRecord, RevisionRecord } from '../../store/proposals-repo.js';
import type { Store } from '../../store/store.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { TaskObserver } from '../ports.js';

/** Mappers from stored records to the views every edge returns. */

/** ISO time, or null. */
export function iso(ms: number): string;
export function iso(ms: number | null): string | null;
export function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

/** How a spec will run (runtime kind, image, network with its default filled in, limits), for reviewers. */
export function sandboxOf(spec: TaskSpec, policy: Policy): SandboxSummary {
  return {
    runtime: spec.runtime.kind,
    image: spec.runtime.kind === 'container' ? spec.runtime.image : null,
    network: spec.network ?? 'none',
    limits: resolveLimits(spec, policy),
  };
}

/** The name of a principal id (ids are never shown to other principals). */
export function principalName(store: Store, id: string): string {
  return store.principals.findById(id)?.name ?? 'unknown';
}

/**
 * What the owner should do next, in words an agent can act on: one source for get_proposal and for what
 * create/revise/confirm answer, so the action always matches the state it is shown with.
 */
export function proposalNextAction(p: ProposalRecord, current: RevisionRecord): string {
  switch (p.state) {
    case 'DRAFT':
      return isConfirmable(current.findings)
        ? `Call confirm_revision with proposal_id ${p.id} and revision_id ${current.id} to send it to review.`
        : 'Fix the error findings with revise_proposal (a full replacement spec), then confirm_revision.';
    case 'IN_REVIEW':
      return 'An independent reviewer must decide; call wait_for_proposal (it returns when the state changes).';
    case 'CHANGES_REQUESTED':
      return 'Read the latest review comments, then revise_proposal and confirm_revision again.';
    case 'APPROVED':
      return `Approved: task ${p.task_id} is queued. Call wait_for_task, then get_task_logs / get_task_outputs.`;
    case 'REJECTED':
      return 'Rejected: read the review comments. Create a new proposal only if the objection can be addressed.';
    default:
      return 'Nothing to do; create a new proposal if the work is still needed.';
  }
}

/** A review as shown. */
export function reviewView(store: Store, r: ReviewRecord): ProposalView['reviews'][number] {
  return {
    review_id: r.id,
    revision_id: r.revision_id,
    revision_digest: r.revision_digest,
    reviewer: principalName(store, r.reviewer_id),
    decision: r.decision,
    comments: r.comments,
    created_at: iso(r.created_at),
    grant_id: (r as ReviewRecord & { grant_id?: string | null }).grant_id ?? null,
  };
}

/** The full proposal view. */
export function proposalView(store: Store, p: ProposalRecord): ProposalView {
  const current = store.proposals.revision(p.current_revision_id);
  if (!current) throw new Error(`proposal ${p.id} has no current revision`);
  return {
    proposal_id: p.id,
    state: p.state,
    title: current.spec.title,
    owner: principalName(store, p.owner_id),
    current_revision: {
      revision_id: current.id,
      number: current.number,
      digest: current.digest,
      confirmed: current.confirmed_at !== null,
      findings: current.findings,
      confirmable: isConfirmable(current.findings),
    },
    revision_count: current.number,
    spec: current.spec,
    task_id: p.task_id,
    reviews: store.proposals.reviews(p.id).map((r) => reviewView(store, r)),
    created_at: iso(p.created_at),
    updated_at: iso(p.updated_at),
    expires_at: iso(p.expires_at),
    next_action: proposalNextAction(p, current),
  };
}

/** A proposal listing line. */
export function proposalSummary(store: Store, p: ProposalRecord): ProposalSummary {
  const current = store.proposals.revisionHead(p.current_revision_id);
  return {
    proposal_id: p.id,
    state: p.state,
    title: current?.title ?? '',
    owner: principalName(store, p.owner_id),
    revision_number: current?.number ?? 0,
    task_id: p.task_id,
    updated_at: iso(p.updated_at),
  };
}

/** What to do after a failure whose cause the agent can fix in its spec (the rest: read the logs). */
const FAILURE_NEXT_STEP: Readonly<Partial<Record<string, string>>> = {
  OUT_OF_MEMORY:
    'Failed: over its memory limit (failure_detail names it). Use less memory, or propose a new revision asking for more in spec.limits.memory_mib, within the policy maximum.',
  DISK_LIMIT:
    'Failed: its task directory went over limits.disk_mib (failure_detail names it). Write less, or propose a new revision asking for more in spec.limits.disk_mib, within the policy maximum.',
  CARD_LOST:
    'Failed: a card or MIG slice it held left its worker while it ran (failure_detail names it: a MIG layout changed, or the card failed), so the worker stopped it; the task itself may be sound. To run it again, create a new proposal with the same spec.',
};

/** The message of a task's recorded `reason` (what happened to its worker), or null. */
function reasonMessage(t: TaskRecord): string | null {
  const message = t.reason?.message;
  return typeof message === 'string' ? message : null;
}

function taskNextAction(t: TaskRecord): string {
  const live = !isSettledTask(t.state);
  // A worker that was unreachable and came back: say so, then what to do in the state it is now in.
  const outage = t.state !== 'QUEUED' && t.reason?.code === 'worker_returned' ? reasonMessage(t) : null;
  const next = nextActionFor(t, live);
  return outage === null ? next : `${capitalize(outage)}. ${next}`;
}

function capitalize(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function nextActionFor(t: TaskRecord, live: boolean): string {
  if (t.desired === 'cancel' && live)
    return t.state === 'QUEUED'
      ? 'Cancelling; it will not start. Call wait_for_task to see it end CANCELLED.'
      : 'Cancelling: the worker stops it (SIGTERM, then SIGKILL after the grace period) and cleans up; call wait_for_task to see it end.';
  switch (t.state) {
    case 'QUEUED':
      return 'Waiting for cards (see reason and position); call wait_for_task.';
    case 'ASSIGNED':
    case 'RUNNING':
    case 'FINALIZING':
      return 'Running; call wait_for_task, or get_task_logs to follow output.';
    case 'COMPLETED':
      return 'Done: read get_task_outputs and get_task_logs.';
    case 'FAILED':
      return (
        (t.failure_reason !== null ? FAILURE_NEXT_STEP[t.failure_reason] : undefined) ??
        'Failed: read failure_reason and get_task_logs with stream "stderr".'
      );
    case 'CANCELLED':
      return 'Cancelled; nothing more will run.';
    case 'RECONCILIATION_REQUIRED':
      return t.reason?.code === WORKER_UNREACHABLE
        ? `${reasonMessage(t) ?? 'The worker is unreachable.'} wait_for_task keeps waiting in this state (timed_out: true after timeout_seconds): call it again.`
        : 'The outcome is unknown (the worker lost track of it, or reported what cannot follow); an operator must reconcile. wait_for_task returns at once in this state.';
  }
}

/** The full task view. */
export function taskView(store: Store, t: TaskRecord, observe: TaskObserver): TaskView {
  const where = observe.placement(t.id);
  const queued = t.state === 'QUEUED' ? observe.queueInfo(t.id) : null;
  return {
    task_id: t.id,
    proposal_id: t.proposal_id,
    revision_id: t.revision_id,
    spec_digest: t.spec_digest,
    title: t.spec.title,
    owner: principalName(store, t.owner_id),
    state: t.state,
    desired: t.desired,
    // A queued task's wait reason; else what happened to its worker, if anything (`worker_unreachable`
    // while RECONCILIATION_REQUIRED, `worker_returned` once it came back with the task alive).
    reason: queued?.reason ?? t.reason,
    position: queued?.position ?? null,
    failure_reason: t.failure_reason,
    failure_detail: t.failure_reason === null ? null : failureDetail(store, t.id),
    exit_code: t.exit_code,
    signal: t.signal,
    worker_id: where?.worker_id ?? null,
    lease_epoch: where?.lease_epoch ?? null,
    cards: (where?.cards ?? []).map((c) => ({ ...c, label: cardLabel(c.index) })),
    simulated: where?.simulated ?? null,
    slurm: slurmJob(store, t.id),
    preemptions: store.preemptions.countFor(t.id),
    created_at: iso(t.created_at),
    approved_at: iso(t.approved_at),
    started_at: iso(t.started_at),
    finished_at: iso(t.finished_at),
    next_action: taskNextAction(t),
  };
}

/** The Slurm job behind a task's latest execution (null on a local worker). */
function slurmJob(store: Store, taskId: string): SlurmJobReport | null {
  const lease = store.leases.latestLeaseForTask(taskId);
  const e = lease ? store.leases.executionForLease(lease.id) : undefined;
  return e ? store.leases.executionSlurm(e.id) : null;
}

/** The worker's detail of a failed task's latest execution (null when none was given). */
function failureDetail(store: Store, taskId: string): string | null {
  const lease = store.leases.latestLeaseForTask(taskId);
  return lease ? (store.leases.executionForLease(lease.id)?.detail ?? null) : null;
}

/** A task listing line. */
export function taskSummary(store: Store, t: TaskRecord, observe: TaskObserver): TaskSummary {
  const queued = t.state === 'QUEUED' ? observe.queueInfo(t.id) : null;
  return {
    task_id: t.id,
    title: t.spec.title,
    owner: principalName(store, t.owner_id),
    state: t.state,
    failure_reason: t.failure_reason,
    position: queued?.position ?? null,
    reason: queued?.reason ?? t.reason,
    updated_at: iso(t.updated_at),
  };
}
