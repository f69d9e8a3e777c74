import type {
  PostRecords,
  RunFacts,
  RungRecords,
  WorkerIsolation,
} from '../../../qualification/verify/verifier.js';
import { WORKLOAD_RESULT_FILE } from '../../../qualification/workload/location.js';
import { MIG_INDEX_BASE } from '../../contracts/sample.js';
import { deriveCardState } from '../../domain/machines/card-state.js';
import type { ExecutionRecord, LeaseRecord } from '../../store/leases-repo.js';
import type { QualificationRunRecord } from '../../store/qualification-repo.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { WorkerRecord } from '../../store/workers-repo.js';
import type { BrokerDeps } from '../deps.js';

/**
 * What the qualification verifier reads, gathered from the master's own store (never from an agent or
 * from the worker's word): the record chain of each rung, and the post-conditions. Read-only.
 */

/** The run's facts for the verifier. */
export function runFacts(deps: BrokerDeps, run: QualificationRunRecord, pin: RunFacts['pin']): RunFacts {
  const worker = deps.store.workers.get(run.worker_id);
  return {
    run_id: run.id,
    worker_id: run.worker_id,
    submitter_id: run.submitter_id,
    reviewer_id: run.reviewer_id,
    reserved_cards: run.reserved_cards,
    // The worker's provider as the master recorded it at hello; only `sim` cards may use gloo on CPU.
    simulated: worker?.provider === 'sim',
    backend: worker?.backend ?? 'local',
    isolation: isolationOf(worker),
    pin,
  };
}

/** The worker row's isolation, as the evidence records it. */
function isolationOf(worker: WorkerRecord | undefined): WorkerIsolation | null {
  return worker ? { mode: worker.isolation, container_engine: worker.container_engine } : null;
}

/** The task as the verifier reads it. */
function taskRecord(task: TaskRecord): NonNullable<RungRecords['task']> {
  return {
    id: task.id,
    proposal_id: task.proposal_id,
    revision_id: task.revision_id,
    owner_id: task.owner_id,
    spec: task.spec,
    spec_digest: task.spec_digest,
    state: task.state,
    failure_reason: task.failure_reason,
    exit_code: task.exit_code,
  };
}

/**
 * The lease, with the audit action that released it (null while it is not released) and, for a leased
 * MIG slice, the profile the master recorded for it (the worker row's card identities, kept across
 * samples; else the latest sample).
 */
function leaseRecord(deps: BrokerDeps, lease: LeaseRecord): NonNullable<RungRecords['lease']> {
  const releasedBy =
    deps.store.audit
      .forSubject('lease', lease.id)
      .filter((e) => (e.data as { to?: unknown } | null)?.to === 'RELEASED')
      .at(-1)?.action ?? null;
  return {
    id: lease.id,
    task_id: lease.task_id,
    worker_id: lease.worker_id,
    lease_epoch: lease.lease_epoch,
    state: lease.state,
    cards: lease.cards.map((c) =>
      c.index < MIG_INDEX_BASE ? c : { ...c, mig_profile: recordedProfile(deps, lease.worker_id, c.index) },
    ),
    released_by: releasedBy,
  };
}

/** The profile the master knows for a slice of a worker; null when it knows none. */
function recordedProfile(deps: BrokerDeps, workerId: string, index: number): string | null {
  const known = deps.store.workers.get(workerId)?.cards.find((c) => c.index === index)?.mig?.profile;
  return known ?? deps.cluster.fleet.get(workerId).cards.find((c) => c.index === index)?.mig?.profile ?? null;
}

/** The execution, with its Slurm job when it ran as one. */
function executionRecord(
  deps: BrokerDeps,
  execution: ExecutionRecord,
): NonNullable<RungRecords['execution']> {
  const slurm = deps.store.leases.executionSlurm(execution.id);
  return {
    id: execution.id,
    task_id: execution.task_id,
    lease_id: execution.lease_id,
    assignment_id: execution.assignment_id,
    worker_id: execution.worker_id,
    lease_epoch: execution.lease_epoch,
    phase: execution.phase,
    outputs: execution.outputs,
    slurm: slurm ? { job_id: slurm.job_id, binding: slurm.binding } : null,
  };
}

/** The record chain of one rung (`perNode` set for a Slurm span rung, `migProfile` for a slice rung). */
export function collectRung(
  deps: BrokerDeps,
  cards: number,
  perNode: number | null,
  proposalId: string | null,
  migProfile: string | null = null,
): RungRecords {
  const { store } = deps;
  const empty: RungRecords = {
    cards,
    per_node: perNode,
    mig_profile: migProfile,
    proposal: null,
    revision: null,
    reviews: [],
    task: null,
    lease: null,
    execution: null,
    output: null,
  };
  const p = proposalId === null ? undefined : store.proposals.get(proposalId);
  if (p === undefined) return empty;
  const task = p.task_id === null ? undefined : store.tasks.get(p.task_id);
  const revision = store.proposals.revision(task?.revision_id ?? p.current_revision_id);
  const lease = task ? store.leases.latestLeaseForTask(task.id) : undefined;
  const execution = lease ? store.leases.executionForLease(lease.id) : undefined;
  const output = execution ? store.logs.output(execution.id, WORKLOAD_RESULT_FILE) : undefined;
  return {
    cards,
    per_node: perNode,
    mig_profile: migProfile,
    proposal: { id: p.id, owner_id: p.owner_id, state: p.state, task_id: p.task_id },
    revision: revision ? { id: revision.id, digest: revision.digest, spec: revision.spec } : null,
    reviews: store.proposals.reviews(p.id).map((r) => ({
      id: r.id,
      revision_id: r.revision_id,
      revision_digest: r.revision_digest,
      reviewer_id: r.reviewer_id,
      decision: r.decision,
    })),
    task: task ? taskRecord(task) : null,
    lease: lease ? leaseRecord(deps, lease) : null,
    execution: execution ? executionRecord(deps, execution) : null,
    output: output
      ? {
          path: output.path,
          sha256: output.sha256,
          size: output.size,
          content_base64: output.content.toString('base64'),
        }
      : null,
  };
}

/**
 * The post-conditions: live leases on the run's cards or of its tasks, the run's cards' derived state
 * with the run's own cordon set aside (they are still cordoned until the verdict), and the audit chain.
 */
export function collectPost(deps: BrokerDeps, run: QualificationRunRecord): PostRecords {
  const { store, config } = deps;
  const now = deps.clock.now();
  const reserved = new Set(run.reserved_cards);
  const residual = store.leases
    .liveLeases()
    .filter(
      (l) =>
        (l.worker_id === run.worker_id && l.cards.some((c) => reserved.has(c.index))) ||
        store.tasks.get(l.task_id)?.owner_id === run.submitter_id,
    )
    .map((l) => ({ lease_id: l.id, task_id: l.task_id, state: l.state, cards: l.cards.map((c) => c.index) }));
  const view = deps.cluster.fleet.workerViews(store, now).find((w) => w.worker_id === run.worker_id);
  const cards = run.reserved_cards.map((index) => {
    const card = view?.cards.find((c) => c.index === index);
    if (view === undefined || card === undefined)
      return { index, state: 'UNKNOWN', reasons: ['the card is no longer reported by its worker'] };
    const derived = deriveCardState({ card: { ...card, cordoned: false }, worker: view }, now, {
      sample_interval_ms: config.timing.sample_interval_ms,
      vram_threshold_pct: config.scheduling.vram_threshold_pct,
    });
    return { index, state: derived.state, reasons: derived.reasons };
  });
  const audit = store.audit.verify();
  return {
    isolation: isolationOf(store.workers.get(run.worker_id)),
    residual_leases: residual,
    cards,
    audit: audit.ok
      ? { ok: true, events: audit.events, detail: null }
      : { ok: false, events: audit.events, detail: `seq ${audit.first_bad_seq}: ${audit.problem}` },
  };
}
