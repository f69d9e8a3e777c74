import { cardLabel, MIG_INDEX_BASE } from '../../src/contracts/sample.js';
import { digestOf, sha256Hex } from '../../src/platform/digest.js';
import { WORKLOAD_RESULT_FILE } from '../workload/location.js';
import { qualificationSpecDigest, type WorkloadPin } from '../workload/spec.js';
import type { WorkloadCheck } from './schema.js';
import { checkSlurmBinding } from './slurm-checks.js';
import { checkWorkloadResult, type SlurmExpectation, workloadCheckNames } from './workload-checks.js';

/**
 * The qualification verifier (docs/qualification.md). It trusts no agent and no worker: its input is what the
 * master itself recorded (proposal, revision, reviews, task, lease, execution, the uploaded output bytes,
 * the audit trail's facts), gathered by the broker from its store, and it recomputes every binding and
 * number. Pure: no I/O, no clock. Fail closed: a record that is missing fails every check that needs
 * it, with a detail saying what was missing; nothing is skipped.
 */

/** A named check's outcome (the same shape as the workload checks). */
export type Check = WorkloadCheck;

/** Facts about the run itself, from the run record. */
export interface RunFacts {
  run_id: string;
  worker_id: string;
  /** The principal created to submit, and the distinct one created to review. */
  submitter_id: string;
  reviewer_id: string;
  /** The cards the run cordoned for itself. */
  reserved_cards: number[];
  /** Whether the worker's cards are simulated (gloo on CPU is acceptable only then). */
  simulated: boolean;
  /** How the worker runs tasks: on its host, or as Slurm jobs over a pool of slots (ADR 0013, 0017). */
  backend: 'local' | 'slurm';
  /** How the worker isolated tasks when the run started, from the master's worker row (null: no row). */
  isolation: WorkerIsolation | null;
  pin: WorkloadPin;
}

/**
 * A worker's task isolation as its latest hello told the master (workers.isolation, migration 004):
 * `bwrap` sandboxes each task; `none` is UNISOLATED. The container engine, when the worker has one.
 */
export interface WorkerIsolation {
  mode: 'bwrap' | 'none';
  container_engine: string | null;
}

/** What the master recorded for one rung. Null members were not found. */
export interface RungRecords {
  cards: number;
  /** A Slurm span rung's GPUs per node (two nodes); null for a rung within one node or host. */
  per_node: number | null;
  /**
   * A single-card rung on a MIG slice: the profile its spec asked for (ADR 0046). Absent or null: a
   * rung on whole cards.
   */
  mig_profile?: string | null;
  proposal: { id: string; owner_id: string; state: string; task_id: string | null } | null;
  /** The revision the task executed (or, with no task, the proposal's current revision). */
  revision: { id: string; digest: string; spec: unknown } | null;
  reviews: Array<{
    id: string;
    revision_id: string;
    revision_digest: string;
    reviewer_id: string;
    decision: string;
  }>;
  task: {
    id: string;
    proposal_id: string;
    revision_id: string;
    owner_id: string;
    spec: unknown;
    spec_digest: string;
    state: string;
    failure_reason: string | null;
    exit_code: number | null;
  } | null;
  lease: {
    id: string;
    task_id: string;
    worker_id: string;
    lease_epoch: number;
    state: string;
    /**
     * The leased cards; `mig_profile` is the profile the master recorded for a leased MIG slice (the
     * worker's card identities), null when it has none.
     */
    cards: Array<{ index: number; uuid: string; mig_profile?: string | null }>;
    /** The audit action that moved the lease to RELEASED (`lease.cleaned` on a cleanup receipt), or null. */
    released_by: string | null;
  } | null;
  execution: {
    id: string;
    task_id: string;
    lease_id: string;
    assignment_id: string;
    worker_id: string;
    lease_epoch: number;
    phase: string;
    outputs: Array<{ path: string; sha256: string; size: number }> | null;
    /** The Slurm job behind it as the worker reported it (null on a local worker, or none reported). */
    slurm: { job_id: string; binding: { nodes: Array<{ node: string; gpus: number[] }> } | null } | null;
  } | null;
  /** The stored `qualification.json` as uploaded (base64 of its bytes). */
  output: { path: string; sha256: string; size: number; content_base64: string } | null;
}

/** What the master recorded after the last rung. */
export interface PostRecords {
  /** Leases not yet RELEASED on the run's cards or of the run's tasks. */
  residual_leases: Array<{ lease_id: string; task_id: string; state: string; cards: number[] }>;
  /** Every reserved card's derived state with the run's own cordon set aside (UNKNOWN if unreported). */
  cards: Array<{ index: number; state: string; reasons: string[] }>;
  audit: { ok: boolean; events: number; detail: string | null };
  /** The worker's isolation now (null: its row is gone). */
  isolation: WorkerIsolation | null;
}

const ok = (name: string, detail: string): Check => ({ name, ok: true, detail });
const bad = (name: string, detail: string): Check => ({ name, ok: false, detail });

/** Checks one rung: the record chain, then the uploaded result (`checkWorkloadResult`). */
export function verifyRung(run: RunFacts, r: RungRecords): Check[] {
  const checks: Check[] = [
    checkProposal(run, r),
    checkSpec(run, r),
    ...checkReview(run, r),
    checkTask(r),
    checkLeaseBinding(run, r),
    ...checkMigSlice(r),
    ...(run.backend === 'slurm' ? [checkSlurmBinding(r.execution?.slurm, r.cards, r.per_node)] : []),
    checkLeaseReleased(r),
  ];
  const output = checkOutput(r);
  checks.push(output.check);
  const { lease, execution, task } = r;
  if (lease === null || execution === null || task === null) {
    // Without the master's own ids there is nothing to bind the document to: fail every check.
    const missing = [task ? null : 'task', lease ? null : 'lease', execution ? null : 'execution']
      .filter((x) => x !== null)
      .join(', ');
    const gemmOnly = { gemm_only: (r.mig_profile ?? null) !== null };
    const names = workloadCheckNames(
      run.backend === 'slurm' ? { slurm: null, ...gemmOnly } : { gpu_uuids: [], ...gemmOnly },
    );
    checks.push(...names.map((name) => bad(name, `not checked: no ${missing} recorded`)));
    return checks;
  }
  checks.push(
    ...checkWorkloadResult(output.document, {
      // Every expected value comes from the master's records, never from the document.
      task_id: task.id,
      execution_id: execution.id,
      assignment_id: execution.assignment_id,
      lease_epoch: lease.lease_epoch,
      gpu_ids: lease.cards.map((c) => c.index),
      gpu_uuids: lease.cards.map((c) => c.uuid),
      worker_id: run.worker_id,
      simulated: run.simulated,
      ...(run.backend === 'slurm' ? { slurm: slurmExpectation(r) } : {}),
      // The rung's shape, from the master's records: a slice rung runs the GEMM alone.
      ...((r.mig_profile ?? null) !== null ? { gemm_only: true } : {}),
    }),
  );
  return checks;
}

/** The master's record of a Slurm rung's job, for the workload checks (null: none recorded). */
function slurmExpectation(r: RungRecords): SlurmExpectation | null {
  const job = r.execution?.slurm;
  if (!job || job.binding === null) return null;
  return { job_id: job.job_id, nodes: job.binding.nodes, per_node: r.per_node ?? r.cards };
}

function checkProposal(run: RunFacts, r: RungRecords): Check {
  const name = 'proposal.recorded';
  const p = r.proposal;
  if (p === null) return bad(name, 'no proposal was recorded for this rung');
  const problems: string[] = [];
  if (p.owner_id !== run.submitter_id)
    problems.push(`owned by ${p.owner_id}, not the run's submitter ${run.submitter_id}`);
  if (p.state !== 'APPROVED') problems.push(`state ${p.state}, not APPROVED`);
  if (r.task === null) problems.push('no task was created');
  else if (p.task_id !== r.task.id || r.task.proposal_id !== p.id)
    problems.push(
      `proposal points at task ${p.task_id}, task ${r.task.id} at proposal ${r.task.proposal_id}`,
    );
  return problems.length === 0 ? ok(name, `${p.id} APPROVED → ${p.task_id}`) : bad(name, problems.join('; '));
}

function checkSpec(run: RunFacts, r: RungRecords): Check {
  const name = 'spec.expected';
  const want = qualificationSpecDigest(
    run.run_id,
    run.worker_id,
    r.cards,
    run.pin,
    r.per_node,
    r.mig_profile ?? null,
  );
  const spec = r.task?.spec ?? r.revision?.spec;
  if (spec === undefined) return bad(name, 'no spec was recorded');
  const found = digestOf(spec);
  const problems: string[] = [];
  if (found !== want)
    problems.push(
      `spec digest ${found} differs from the qualification workload's ${want} for ${r.cards} card(s)`,
    );
  if (r.task !== null && r.task.spec_digest !== found)
    problems.push(`task.spec_digest ${r.task.spec_digest} is not the digest of its spec (${found})`);
  return problems.length === 0 ? ok(name, `digest ${want}`) : bad(name, problems.join('; '));
}

function checkReview(run: RunFacts, r: RungRecords): Check[] {
  const independent = 'review.independent';
  const revisionName = 'review.revision';
  const task = r.task;
  const approvals = r.reviews.filter((v) => v.decision === 'APPROVE');
  if (task === null || r.proposal === null) {
    const why = 'not checked: no task was approved';
    return [bad(independent, why), bad(revisionName, why)];
  }
  const approval = approvals.find((v) => v.revision_id === task.revision_id) ?? approvals[0];
  if (approval === undefined) {
    const why = 'no APPROVE review was recorded';
    return [bad(independent, why), bad(revisionName, why)];
  }
  const owner = r.proposal.owner_id;
  const indep =
    approval.reviewer_id !== owner && approval.reviewer_id !== run.submitter_id
      ? ok(independent, `approved by ${approval.reviewer_id}, submitted by ${owner}`)
      : bad(independent, `approved by ${approval.reviewer_id}, the proposal's own submitter (self-approval)`);
  const problems: string[] = [];
  if (approval.revision_id !== task.revision_id)
    problems.push(`the approval judged revision ${approval.revision_id}, the task ran ${task.revision_id}`);
  if (approval.revision_digest !== task.spec_digest)
    problems.push(`the approval judged digest ${approval.revision_digest}, the task ran ${task.spec_digest}`);
  if (r.revision === null || r.revision.id !== task.revision_id)
    problems.push('the executed revision was not recorded');
  else if (r.revision.digest !== task.spec_digest || digestOf(r.revision.spec) !== task.spec_digest)
    problems.push(`revision ${r.revision.id} does not hash to the digest the task ran`);
  const rev =
    problems.length === 0
      ? ok(revisionName, `review ${approval.id} judged ${task.revision_id} (${task.spec_digest})`)
      : bad(revisionName, problems.join('; '));
  return [indep, rev];
}

function checkTask(r: RungRecords): Check {
  const name = 'task.completed';
  const t = r.task;
  if (t === null) return bad(name, 'no task was recorded');
  if (t.state === 'COMPLETED' && t.exit_code === 0 && t.failure_reason === null)
    return ok(name, `${t.id} COMPLETED, exit 0`);
  return bad(
    name,
    `${t.id} is ${t.state} (exit ${t.exit_code ?? 'none'}, failure_reason ${t.failure_reason ?? 'none'})`,
  );
}

function checkLeaseBinding(run: RunFacts, r: RungRecords): Check {
  const name = 'lease.binding';
  const { lease, execution, task } = r;
  if (task === null || lease === null || execution === null)
    return bad(
      name,
      `missing record: ${[task ? '' : 'task', lease ? '' : 'lease', execution ? '' : 'execution'].filter(Boolean).join(', ')}`,
    );
  const problems: string[] = [];
  if (lease.task_id !== task.id) problems.push(`lease ${lease.id} is for task ${lease.task_id}`);
  if (lease.worker_id !== run.worker_id) problems.push(`lease is on worker ${lease.worker_id}`);
  if (lease.cards.length !== r.cards)
    problems.push(`lease holds ${lease.cards.length} card(s), expected ${r.cards}`);
  const outside = lease.cards.filter((c) => !run.reserved_cards.includes(c.index)).map((c) => c.index);
  if (outside.length > 0) problems.push(`cards ${outside.join(', ')} were not reserved for the run`);
  if (execution.task_id !== task.id)
    problems.push(`execution ${execution.id} is for task ${execution.task_id}`);
  if (execution.lease_id !== lease.id)
    problems.push(`execution ${execution.id} is for lease ${execution.lease_id}`);
  if (execution.lease_epoch !== lease.lease_epoch)
    problems.push(`execution epoch ${execution.lease_epoch} ≠ lease epoch ${lease.lease_epoch}`);
  if (execution.worker_id !== run.worker_id) problems.push(`execution ran on ${execution.worker_id}`);
  return problems.length === 0
    ? ok(
        name,
        `lease ${lease.id} epoch ${lease.lease_epoch} on cards ${lease.cards.map((c) => c.index).join(',')}`,
      )
    : bad(name, problems.join('; '));
}

/**
 * `mig.slice`, on a slice rung or a lease holding a slice: the rung asked for a profile, its lease holds
 * exactly one MIG slice, the master recorded that slice's profile and it is the one asked for, and the
 * slice is named by a `MIG-` uuid. Fail closed: a slice the master has no profile for, a whole-card rung
 * that ran on a slice, or a slice rung on a whole card all fail. A whole-card rung on whole cards has
 * no such check.
 */
function checkMigSlice(r: RungRecords): Check[] {
  const name = 'mig.slice';
  const profile = r.mig_profile ?? null;
  const cards = r.lease?.cards ?? [];
  const slices = cards.filter((c) => c.index >= MIG_INDEX_BASE);
  if (profile === null && slices.length === 0) return [];
  if (profile === null)
    return [
      bad(
        name,
        `a whole-card rung ran on MIG slice(s) ${slices.map((c) => cardLabel(c.index)).join(', ')}: all_reduce is not offered across MIG instances`,
      ),
    ];
  if (r.lease === null) return [bad(name, `no lease was recorded for the ${profile} slice rung`)];
  const problems: string[] = [];
  const card = cards[0];
  if (cards.length !== 1 || card === undefined)
    problems.push(`the lease holds ${cards.length} cards, a slice rung exactly one slice`);
  else if (card.index < MIG_INDEX_BASE) problems.push(`card ${card.index} is a whole card, not a MIG slice`);
  else {
    const recorded = card.mig_profile ?? null;
    if (recorded === null)
      problems.push(`the master has no profile recorded for slice ${cardLabel(card.index)}`);
    else if (recorded !== profile)
      problems.push(`slice ${cardLabel(card.index)} has profile ${recorded}, the rung asked for ${profile}`);
    if (!card.uuid.startsWith('MIG-')) problems.push(`slice uuid ${card.uuid} is not a MIG- uuid`);
  }
  return [
    problems.length === 0 && card !== undefined
      ? ok(name, `${cardLabel(card.index)} (${profile}) ${card.uuid}`)
      : bad(name, problems.join('; ')),
  ];
}

function checkLeaseReleased(r: RungRecords): Check {
  const name = 'lease.released';
  const { lease, execution } = r;
  if (lease === null) return bad(name, 'no lease was recorded');
  const problems: string[] = [];
  if (lease.state !== 'RELEASED') problems.push(`lease ${lease.id} is ${lease.state}, not RELEASED`);
  else if (lease.released_by !== 'lease.cleaned')
    problems.push(
      `lease was released by ${lease.released_by ?? 'no recorded event'}, not by a cleanup receipt`,
    );
  if (execution === null) problems.push('no execution was recorded');
  else if (execution.phase !== 'cleaned')
    problems.push(`execution ${execution.id} is ${execution.phase}; no cleanup receipt`);
  return problems.length === 0
    ? ok(name, 'released after the worker’s cleanup receipt')
    : bad(name, problems.join('; '));
}

function checkOutput(r: RungRecords): { check: Check; document: unknown } {
  const name = 'output.present';
  const out = r.output;
  if (out === null)
    return { check: bad(name, `${WORKLOAD_RESULT_FILE} was not uploaded`), document: undefined };
  const bytes = Buffer.from(out.content_base64, 'base64');
  const sha = sha256Hex(bytes);
  const problems: string[] = [];
  if (sha !== out.sha256) problems.push(`stored bytes hash to ${sha}, recorded ${out.sha256}`);
  const declared = r.execution?.outputs?.find((o) => o.path === out.path);
  if (declared === undefined) problems.push('the execution report does not list it');
  else if (declared.sha256 !== sha)
    problems.push(`the execution report says sha256 ${declared.sha256}, stored ${sha}`);
  let document: unknown;
  try {
    document = JSON.parse(bytes.toString('utf8'));
  } catch {
    problems.push('it is not JSON');
  }
  return {
    check:
      problems.length === 0
        ? ok(name, `${out.path} sha256 ${sha} (${bytes.length} bytes)`)
        : bad(name, problems.join('; ')),
    document,
  };
}

/** Checks what must hold once the ladder is done. */
export function verifyPost(post: PostRecords, run: Pick<RunFacts, 'isolation'>): Check[] {
  const residual = post.residual_leases;
  const notAvailable = post.cards.filter((c) => c.state !== 'AVAILABLE');
  return [
    residual.length === 0
      ? ok('post.no_residual_leases', 'no live lease on the run’s cards or of its tasks')
      : bad(
          'post.no_residual_leases',
          residual
            .map((l) => `lease ${l.lease_id} (task ${l.task_id}) is ${l.state} on cards ${l.cards.join(',')}`)
            .join('; '),
        ),
    post.cards.length === 0
      ? // The broker reports every reserved card (UNKNOWN when it is gone), so none means none reserved.
        ok('post.cards_available', 'the run reserved no card')
      : notAvailable.length === 0
        ? ok('post.cards_available', `cards ${post.cards.map((c) => c.index).join(',')} are AVAILABLE`)
        : bad(
            'post.cards_available',
            notAvailable
              .map((c) => `card ${c.index} is ${c.state} (${c.reasons.join('; ') || 'no reason'})`)
              .join('; '),
          ),
    post.audit.ok
      ? ok('post.audit_chain', `${post.audit.events} events, chain intact`)
      : bad('post.audit_chain', `audit chain broken: ${post.audit.detail ?? 'unknown problem'}`),
    checkIsolation(run.isolation, post.isolation),
  ];
}

/**
 * The evidence records the isolation the run started under; that is only true of every rung if the
 * worker did not come back with another mode mid-run (a restart with other flags), so a change, or a
 * worker the master no longer knows, fails closed. An UNISOLATED worker does not fail the run: the
 * ladder proves the cards and their interconnect, which a sandbox does not change, and whether tasks
 * may run unisolated is policy.require_isolation's decision, made before any rung was placed
 * (docs/qualification.md, "Isolation").
 */
function checkIsolation(start: WorkerIsolation | null, end: WorkerIsolation | null): Check {
  const name = 'post.isolation_unchanged';
  const show = (i: WorkerIsolation | null) =>
    i === null
      ? 'unknown (no worker row)'
      : `${i.mode === 'none' ? 'none (UNISOLATED)' : i.mode}${i.container_engine ? `, container engine ${i.container_engine}` : ''}`;
  if (start === null || end === null)
    return bad(name, `worker isolation ${show(start)} at start, ${show(end)} at the end`);
  if (start.mode !== end.mode || start.container_engine !== end.container_engine)
    return bad(
      name,
      `worker isolation changed during the run: ${show(start)} at start, ${show(end)} at the end`,
    );
  return ok(name, `worker isolation ${show(start)} throughout`);
}

/** The verdict: FAILED if any check failed; INCONCLUSIVE if none failed but a count did not run; else PASSED. */
export function verdictOf(
  rungChecks: ReadonlyArray<readonly Check[]>,
  postChecks: readonly Check[],
  untested: number,
): 'PASSED' | 'FAILED' | 'INCONCLUSIVE' {
  const failed = [...rungChecks.flat(), ...postChecks].some((c) => !c.ok);
  if (failed) return 'FAILED';
  if (untested > 0 || rungChecks.length === 0) return 'INCONCLUSIVE';
  return 'PASSED';
}
