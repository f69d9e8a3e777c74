import { BrokerError } from '../../contracts/errors.js';
import { cardLabel, MIG_INDEX_BASE } from '../../contracts/sample.js';
import { DEFAULT_LADDER, type QualificationRunView } from '../../contracts/tools-qualification.js';
import { isTerminalTask } from '../../domain/machines/task.js';
import { type LadderPlan, planLadder, usableNodes } from '../../domain/qualification/ladder.js';
import type { Principal } from '../../store/principals-repo.js';
import type { QualificationRunRecord, SubmitterKind } from '../../store/qualification-repo.js';
import type { WorkerRecord } from '../../store/workers-repo.js';
import type { BrokerDeps } from '../deps.js';
import { cordonCard, uncordonCard } from '../machines/cordon.js';
import {
  canMoveQualificationRun,
  moveQualificationRun,
  outcomeEvent,
  type RunOutcome,
} from '../machines/qualification-run.js';
import type { QualificationLauncher } from '../ports.js';
import { createPrincipal, revokePrincipal } from '../principals.js';
import { CARDS_TOPIC, qualificationTopic } from '../topics.js';
import { fetchPage } from './paging.js';
import { runSliceRungs, workerLayout } from './qualification-layout.js';
import { assertInterpreterReady, assertPoolIdle } from './qualification-preflight.js';
import { cancelTask } from './tasks.js';
import { iso, principalName } from './views.js';

/**
 * Use cases of qualification runs (docs/qualification.md): start (validate, create the run's two principals,
 * cordon its cards for it, hand it to the background runner), read, and finish (store the evidence,
 * return the cards only on PASSED, revoke the principals). The runner itself lives in
 * qualification/run/runner.ts; src/master/qualification-service.ts connects the two.
 */

/** The cordon reason that marks a card as reserved by a run. */
export const runCordonReason = (runId: string) => `qualification run ${runId}`;

/** The launcher of runs; UNAVAILABLE on a master that has none. */
function qualificationLauncher(deps: BrokerDeps): QualificationLauncher {
  if (deps.qualification === undefined)
    throw new BrokerError(
      'UNAVAILABLE',
      'this master cannot run qualifications',
      'Start the master with `gpu-broker serve` or `gpu-broker start`.',
    );
  return deps.qualification;
}

/** The worker to qualify, once it is enrolled, online, not draining, ready and not already being qualified. */
function qualifiableWorker(deps: BrokerDeps, workerId: string, now: number): WorkerRecord {
  const { store } = deps;
  const worker = store.workers.get(workerId);
  if (!worker)
    throw new BrokerError('NOT_FOUND', `no worker ${workerId}`, 'list_workers shows enrolled workers.');
  if (!deps.cluster.fleet.isOnline(worker.id, now))
    throw new BrokerError(
      'INVALID_STATE',
      `worker ${worker.id} is offline`,
      'Start its worker daemon (gpu-broker worker …) and qualify it once it is online.',
    );
  if (worker.draining)
    throw new BrokerError(
      'INVALID_STATE',
      `worker ${worker.id} is draining`,
      `Undrain it first: gpu-broker undrain ${worker.id}.`,
    );
  assertInterpreterReady(deps, worker);
  const running = store.qualifications.runningOn(worker.id);
  if (running)
    throw new BrokerError(
      'CONFLICT',
      `qualification run ${running.id} is already running on ${worker.id}`,
      `Wait for it: gpu-broker qualify show ${running.id}.`,
    );
  return worker;
}

/** A run's ladder and the cards it reserves for itself. */
type RunPlan = LadderPlan & { reserved: number[] };

/**
 * Plans the run's ladder on the worker's usable cards, and the cards the run cordons for itself. A card
 * in MIG mode is never tested whole: its usable slices go to the planner for the single-card GEMM rungs
 * (docs/decisions/0046-mig-slices-as-cards.md).
 */
function planRun(deps: BrokerDeps, worker: WorkerRecord, cards: number[] | undefined): RunPlan {
  const { store } = deps;
  // Cards an operator cordoned, or whose cleanup was never confirmed, are not the run's to take.
  const live = deps.cluster.fleet.get(worker.id).cards;
  const cordoned = new Set(
    store.workers
      .cordons()
      .filter((c) => c.worker_id === worker.id)
      .map((c) => c.card_index),
  );
  const quarantined = new Set(
    store.leases
      .liveCards()
      .filter((c) => c.worker_id === worker.id && c.state === 'QUARANTINED')
      .map((c) => c.card_index),
  );
  const layout = workerLayout(
    live.length > 0 ? live : worker.cards,
    (i) => cordoned.has(i) || quarantined.has(i),
  );
  const pool = worker.backend === 'slurm' ? usableNodes(worker.slurm?.nodes ?? [], live) : null;
  if (pool !== null) assertPoolIdle(deps, worker.id, live);
  const isWhole = (i: number) => i < MIG_INDEX_BASE;
  const plan = planLadder({
    worker_id: worker.id,
    requested: [...new Set(cards ?? DEFAULT_LADDER)].sort((a, b) => a - b),
    explicit: cards !== undefined,
    usable: layout.whole.length,
    total: layout.total,
    cordoned: [...cordoned].filter(isWhole).length,
    quarantined: [...quarantined].filter(isWhole).length,
    max_cards: deps.config.policy.max_cards,
    network_allowed: deps.config.policy.allow_network,
    pool,
    mig_mode_cards: layout.migMode,
    slices: layout.slices,
    mig_refused: migRefused(deps, pool !== null),
  });
  // A Slurm pool's slots are not devices: Slurm places each rung anywhere in the partition, so the run
  // holds every usable slot for itself (ADR 0017). A local worker gives the run its lowest whole cards,
  // and the one slice each slice rung runs on (the spec's profile then finds exactly that slice).
  const whole =
    pool !== null
      ? layout.whole
      : layout.whole.slice(0, Math.max(0, ...plan.ladder, ...(plan.span ? [plan.span.cards] : [])));
  const reserved = [...whole, ...plan.slices.map((s) => s.index)].sort((a, b) => a - b);
  return { ...plan, reserved };
}

/** Why a run may not test MIG slices on this worker, or null (see `LadderInput.mig_refused`). */
function migRefused(deps: BrokerDeps, slurmPool: boolean): string | null {
  if (deps.config.policy.mig === 'forbid')
    return 'policy.mig is "forbid", so no task may lease their slices (set it to "allow", or cordon those cards)';
  // A pool's rung is a Slurm job whose workload reads the GPUs Slurm gave it, not a slice binding:
  // the GEMM-only slice rung is built for local workers only (ADR 0046).
  if (slurmPool)
    return 'slice rungs are not built for a Slurm pool yet (a rung there is a Slurm job, not a slice binding); cordon those cards to qualify the rest';
  return null;
}

/** start_qualification. Call inside a transaction. */
export function startQualification(
  deps: BrokerDeps,
  principal: Principal,
  input: { worker_id: string; cards?: number[] | undefined; submitter?: SubmitterKind | undefined },
): QualificationRunView {
  const { store, clock } = deps;
  const launcher = qualificationLauncher(deps);
  const kind = input.submitter ?? 'scripted';
  launcher.assertReady(kind);
  const now = clock.now();
  const worker = qualifiableWorker(deps, input.worker_id, now);
  const { requested, ladder, slices, span, skipped, reserved } = planRun(deps, worker, input.cards);

  const id = deps.ids('qrun');
  const actor = principal.name;
  const submitter = createPrincipal(deps, { name: `qual-submitter-${id}`, roles: ['submitter'] }, actor);
  const reviewer = createPrincipal(deps, { name: `qual-reviewer-${id}`, roles: ['reviewer'] }, actor);
  const run: QualificationRunRecord = {
    id,
    worker_id: worker.id,
    state: 'RUNNING',
    submitter_kind: kind,
    requested_by: principal.id,
    submitter_id: submitter.principal.id,
    reviewer_id: reviewer.principal.id,
    requested,
    ladder,
    span,
    skipped,
    reserved_cards: reserved,
    evidence: null,
    digest: null,
    detail: null,
    created_at: now,
    updated_at: now,
    finished_at: null,
  };
  store.qualifications.insert(run);
  for (const index of reserved) {
    cordonCard(deps, {
      worker_id: worker.id,
      index,
      reason: runCordonReason(id),
      actor,
      at: now,
      audit: { reason: runCordonReason(id), run_id: id },
    });
  }
  store.audit.append({
    at: now,
    actor,
    action: 'qualification.started',
    subject_type: 'qualification_run',
    subject_id: id,
    data: {
      worker_id: worker.id,
      requested,
      ladder,
      // The slice rungs are the run's reserved slices (runSliceRungs reads them back from reserved_cards).
      slices: slices.map((r) => ({ card: cardLabel(r.index), profile: r.profile })),
      span,
      skipped,
      reserved_cards: reserved,
      submitter: kind,
    },
  });
  const tokens = { submitter: submitter.token, reviewer: reviewer.token };
  store.afterCommit(() => {
    deps.notifier.notify(CARDS_TOPIC);
    deps.cluster.requestPass();
    launcher.launch(id, tokens);
  });
  return runView(deps, run);
}

/**
 * cancel_qualification: stops a RUNNING run. It ends CANCELLED without evidence and its cards stay
 * cordoned (a task already running finishes on its own). Call inside a transaction.
 */
export function cancelQualification(
  deps: BrokerDeps,
  principal: Principal,
  runId: string,
): QualificationRunView {
  const run = deps.store.qualifications.get(runId);
  if (!run)
    throw new BrokerError(
      'NOT_FOUND',
      `no qualification run ${runId}`,
      'list_qualification_runs shows them.',
    );
  if (!canMoveQualificationRun(run, 'cancel'))
    throw new BrokerError(
      'INVALID_STATE',
      `run ${runId} already ended (${run.state})`,
      'Nothing to cancel.',
      { state: run.state },
    );
  deps.store.audit.append({
    at: deps.clock.now(),
    actor: principal.name,
    action: 'qualification.cancel_requested',
    subject_type: 'qualification',
    subject_id: runId,
  });
  // The run's own tasks (owned by its submitter principal) stop too, so none lands on cards later.
  for (const t of deps.store.tasks.list({ owner_id: run.submitter_id, limit: 64 })) {
    if (!isTerminalTask(t.state)) cancelTask(deps, principal, t.id);
  }
  deps.store.afterCommit(() => {
    // A run whose runner is gone (it cannot be, short of a bug) is ended here so it never stays RUNNING.
    if (!deps.qualification?.cancel(runId))
      finishRun(deps, runId, { cancelled: `cancelled by ${principal.name}` });
  });
  return {
    ...runView(deps, run),
    next_action: 'Cancelling: get_qualification_run shows CANCELLED once the runner stopped.',
  };
}

/** get_qualification_run. */
export function getQualificationRun(deps: BrokerDeps, runId: string): QualificationRunView {
  const run = deps.store.qualifications.get(runId);
  if (!run)
    throw new BrokerError('NOT_FOUND', `no qualification run ${runId}`, 'Check the id that qualify printed.');
  return runView(deps, run);
}

/** list_qualification_runs: newest first, with an id cursor. */
export function listQualificationRuns(
  deps: BrokerDeps,
  q: { limit?: number | undefined; cursor?: string | undefined },
) {
  const { page, next_cursor } = fetchPage(q.limit, (n) => deps.store.qualifications.recent(q.cursor, n));
  return {
    runs: page.map((r) => ({
      run_id: r.id,
      state: r.state,
      worker_id: r.worker_id,
      submitter: r.submitter_kind,
      ladder: r.ladder,
      verdict: r.state === 'PASSED' || r.state === 'FAILED' || r.state === 'INCONCLUSIVE' ? r.state : null,
      digest: r.digest,
      created_at: iso(r.created_at),
      finished_at: iso(r.finished_at),
    })),
    next_cursor,
  };
}

/** The view both tools return. */
export function runView(deps: BrokerDeps, run: QualificationRunRecord): QualificationRunView {
  const verdict =
    run.state === 'PASSED' || run.state === 'FAILED' || run.state === 'INCONCLUSIVE' ? run.state : null;
  return {
    run_id: run.id,
    state: run.state,
    worker_id: run.worker_id,
    submitter: run.submitter_kind,
    submitter_principal: principalName(deps.store, run.submitter_id),
    reviewer_principal: principalName(deps.store, run.reviewer_id),
    requested: run.requested,
    ladder: run.ladder,
    slices: runSliceRungs(deps, run).map((r) => ({ card: r.card, profile: r.profile })),
    span: run.span,
    skipped: run.skipped,
    reserved_cards: run.reserved_cards,
    steps: deps.store.qualifications.steps(run.id).map((s) => ({
      seq: s.seq,
      at: iso(s.at),
      elapsed_ms: s.at - run.created_at,
      cards: s.cards,
      text: s.text,
    })),
    verdict,
    digest: run.digest,
    evidence: run.evidence,
    detail: run.detail,
    created_at: iso(run.created_at),
    finished_at: iso(run.finished_at),
    next_action: nextAction(run),
  };
}

function nextAction(run: QualificationRunRecord): string {
  const cards = run.reserved_cards.map((i) => `${run.worker_id}:${cardLabel(i)}`).join(' ');
  switch (run.state) {
    case 'RUNNING':
      return `Running; call get_qualification_run with run_id ${run.id} for progress.`;
    case 'PASSED':
      return 'Passed; the cards are back in the pool. Keep the evidence document and its digest.';
    default:
      return run.reserved_cards.length > 0
        ? `The cards stay cordoned: read failed_checks in the evidence (or detail), fix the host, then qualify again or uncordon them (gpu-broker uncordon ${cards}).`
        : 'Nothing was cordoned; read the evidence and qualify again.';
  }
}

/** Records one progress line. */
export function recordStep(deps: BrokerDeps, runId: string, cards: number | null, text: string): void {
  deps.store.transaction(() => {
    deps.store.qualifications.addStep(runId, deps.clock.now(), cards, text);
    deps.store.afterCommit(() => deps.notifier.notify(qualificationTopic(runId)));
  });
}

/**
 * Ends a run: with the evidence (verdict PASSED, FAILED or INCONCLUSIVE) or cancelled with a reason,
 * through the run's table (`moveQualificationRun`). Only PASSED returns the run's cards to the pool;
 * otherwise their cordon stays, re-labelled, until an operator uncordons them. The run's principals are
 * revoked and any task of theirs still live is cancelled. A run that already ended (the table takes no
 * event from a final state: a runner finishing after a cancel) is left alone.
 */
export function finishRun(deps: BrokerDeps, runId: string, outcome: RunOutcome): void {
  const { store } = deps;
  store.transaction(() => {
    const found = store.qualifications.get(runId);
    if (!found || !canMoveQualificationRun(found, outcomeEvent(outcome))) return;
    const run = moveQualificationRun(deps, found, outcome, 'qualification');
    const { state, updated_at: now } = run;
    const ours = new Set(
      store.workers
        .cordons()
        .filter((c) => c.worker_id === run.worker_id && c.reason === runCordonReason(run.id))
        .map((c) => c.card_index),
    );
    for (const index of run.reserved_cards) {
      if (!ours.has(index)) continue; // an operator changed this cordon during the run: theirs now
      const card = { worker_id: run.worker_id, index, actor: 'qualification', at: now };
      if (state === 'PASSED') uncordonCard(deps, { ...card, audit: { run_id: run.id, verdict: state } });
      else {
        const reason = `qualification run ${run.id} ended ${state}; uncordon once the host is checked`;
        cordonCard(deps, { ...card, reason, audit: { run_id: run.id, reason } });
      }
    }
    // Whatever the run left queued or running must not wait for ever on cards no longer reserved for it.
    const owner = store.principals.findById(run.submitter_id);
    if (owner) {
      for (const t of store.tasks.list({ owner_id: owner.id, limit: 100 })) {
        if (isTerminalTask(t.state) || t.desired === 'cancel') continue;
        try {
          cancelTask(deps, owner, t.id);
        } catch (err) {
          deps.logger.warn({ err, task_id: t.id }, 'qualification: could not cancel a leftover task');
        }
      }
    }
    for (const id of [run.submitter_id, run.reviewer_id]) {
      const p = store.principals.findById(id);
      if (p && p.revoked_at === null) revokePrincipal(deps, p.name, 'qualification');
    }
    // The move notified the run's and the cards' topics; the cards it freed or kept change the pool.
    store.afterCommit(() => deps.cluster.requestPass());
  });
}

/** At start-up: runs left RUNNING by a previous process can never finish; cancel them (cards stay cordoned). */
export function cancelInterruptedRuns(deps: BrokerDeps): number {
  const runs = deps.store.qualifications.running();
  for (const run of runs) finishRun(deps, run.id, { cancelled: 'the master restarted during the run' });
  return runs.length;
}
