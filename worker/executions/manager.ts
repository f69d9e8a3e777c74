import type { Logger } from 'pino';
import type { CardSample } from '../../src/contracts/sample.js';
import type { ExecutionPlan, MasterMessage, WorkerErrorCode } from '../../src/contracts/worker-protocol.js';
import { DEFAULT_MAX_LOG_BYTES_PER_TASK } from '../../src/contracts/worker-protocol.js';
import type { OutboxSender } from '../link/outbox.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import type { ExecutionRecord, LocalStore } from '../store/local-store.js';
import {
  CARD_GONE_SAMPLES,
  cardLostSummary,
  cardsCleanCheck,
  goneCardsProblem,
  heldCardsProblem,
  leasedCardsProblem,
} from './card-check.js';
import type { BackendRef, ExecutionExit, ExecutionHandle, ExecutionHooks, Executor } from './executor.js';
import { PhaseReports } from './phase-reports.js';
import { pinsProblem } from './pin-check.js';
import { exitSummary } from './reports.js';

/**
 * What the worker does with `assign`, `cancel` and `query` (docs/worker-protocol.md), and how a running
 * execution's events become messages. Phases an execution goes through on this worker:
 *
 *   accepted   fenced, recorded and reported; the executor starts it once the master acknowledged the
 *              report (it then recorded the acceptance and will not give the task to another worker;
 *              docs/operations.md "Partitions"). A `cancel` or a refusal of that report before then ends it `exited`
 *              (CANCELLED, never started) and `cleaned`: nothing ran
 *   rejected   refused before anything ran (STALE_EPOCH, or SETUP_FAILED: unknown card, uuid mismatch,
 *              a pinned file whose sha256 differs on this host)
 *   started    its process group runs (pgid recorded, so a restarted worker can stop it)
 *   exited     its main process ended and its outputs are queued ahead of this report (CARD_LOST when
 *              a leased card left this worker's samples under it: `cardsSampled`)
 *   cleaned    cleanup receipt: the group is gone and the cards are clean
 *   cleanup_failed  no receipt within cleanup_timeout_seconds; the master quarantines the lease
 *
 * The `handle*` methods run inside the daemon's transaction that also raises the master mark, so the
 * fencing check, the execution record, the outgoing report and the mark commit together. Anything with
 * a side effect outside SQLite (starting or signalling a process) is returned as `after`, which the
 * daemon runs once the transaction has committed.
 */

/** What processing one sequenced master message produced. */
export interface Handled {
  /** Runs after the transaction commits. */
  readonly after?: () => void;
  /** An `error` reply for the master (the message is still acknowledged). */
  readonly error?: { readonly code: WorkerErrorCode; readonly message: string };
}

/** What the manager needs from the daemon. */
export interface ExecutionManagerDeps {
  readonly store: LocalStore;
  readonly outbox: OutboxSender;
  readonly logger: Logger;
  readonly sampler: CardSampler;
  /** The cards of the latest successful sample, to check a plan's indexes and uuids. */
  readonly latestCards: () => CardSample[] | null;
  /** Runs the plans: the local or the Slurm executor, bound by the daemon (daemon/executors.ts). */
  readonly executor: Executor;
}

interface Running {
  readonly plan: ExecutionPlan;
  readonly handle: ExecutionHandle;
  /** Set when the worker itself stops the execution (clean shutdown), to report WORKER_LOST. */
  stopping: boolean;
  /** Set when the master asked it to stop (cancel, preemption): a card lost afterwards changes nothing. */
  stopAsked: boolean;
  /** Successive successful samples that lacked one of its cards (`cardsSampled`). */
  missingSamples: number;
  /** Why the worker stopped it because a leased card is gone (reported CARD_LOST); null otherwise. */
  lostCards: string | null;
  /** Its exit is reported: only the cleanup receipt is left, which judges the cards itself. */
  exited: boolean;
  /** Settles once the `exited` report is queued. */
  readonly exitReported: Promise<void>;
  /** Settles once the final report (cleaned / cleanup_failed) is queued. */
  readonly settled: Promise<void>;
}

type Sequenced<T extends MasterMessage['type']> = Extract<MasterMessage, { type: T }>;

/** How long a clean stop waits for the cleanup receipts of executions it cancelled. */
const STOP_CLEANUP_WAIT_MS = 5_000;

/** Executions of this worker process; see the module comment. */
export class ExecutionManager {
  private readonly running = new Map<string, Running>();
  /** Accepted executions waiting for the master to acknowledge their `accepted` report, by id. */
  private readonly awaiting = new Map<
    string,
    { plan: ExecutionPlan; report: { boot_id: string; seq: number } }
  >();
  /** Log bytes kept per task started from now on: the master's cap, from its latest welcome. */
  private logCap = DEFAULT_MAX_LOG_BYTES_PER_TASK;

  /** Records and reports each phase (./phase-reports.ts). */
  private readonly reports: PhaseReports;

  constructor(private readonly deps: ExecutionManagerDeps) {
    this.reports = new PhaseReports(deps);
  }

  /** The master's per-task log cap (welcome); applies to executions started after it. */
  setLogCap(bytes: number): void {
    this.logCap = bytes;
  }

  /** How many executions this process is running. */
  runningCount(): number {
    return this.running.size;
  }

  /** How many accepted executions wait for the master to acknowledge their acceptance. */
  awaitingCount(): number {
    return this.awaiting.size;
  }

  /**
   * The master refused one of this worker's messages (`error` with `ref_seq`): if it was the `accepted`
   * report of an execution waiting to start, the master did not record the acceptance (it withdrew the
   * assign and gave the task to another worker): the execution never starts. Returns whether it was one.
   */
  acceptanceRefused(bootId: string, seq: number, why: string): boolean {
    for (const [id, w] of this.awaiting)
      if (w.report.boot_id === bootId && w.report.seq === seq) {
        this.endUnstarted(id, `the master refused its acceptance: ${why}`);
        return true;
      }
    return false;
  }

  /**
   * Starts `plan` once the master acknowledged its `accepted` report (`report`): acknowledged means
   * committed, so from then on the master holds the execution as this worker's and never gives the task
   * to another one. Until then nothing runs, so a master that heard nothing (a partition) may withdraw
   * the assign and requeue the task elsewhere; its `cancel` (or its refusal of the report) then ends it
   * here unstarted.
   */
  private startWhenAcknowledged(plan: ExecutionPlan, report: { boot_id: string; seq: number }): void {
    this.awaiting.set(plan.execution_id, { plan, report });
    this.deps.outbox.whenAcked(report, () => {
      if (!this.awaiting.delete(plan.execution_id)) return;
      this.run(plan);
    });
  }

  /** An accepted execution that never started ends (`exited` CANCELLED, then `cleaned`: nothing ran). */
  private endUnstarted(executionId: string, detail: string): void {
    const w = this.awaiting.get(executionId);
    if (w === undefined) return;
    this.awaiting.delete(executionId);
    this.deps.outbox.forgetAck(w.report);
    this.reports.withdrawn(executionId, detail);
  }

  /** assign: re-delivery check, fencing, card check, record, report; the run starts after commit. */
  handleAssign(msg: Sequenced<'assign'>): Handled {
    const { store, logger } = this.deps;
    const plan = msg.plan;
    // A known execution is never run twice; the master gets its latest phase again. This comes before
    // fencing because a newer lease on the same cards would otherwise turn an execution that ran into
    // a misleading STALE_EPOCH rejection. It only reads and reports, so nothing runs ahead of fencing.
    const known = store.getExecution(plan.execution_id);
    if (known !== null) {
      logger.info(
        { execution_id: plan.execution_id, phase: known.phase },
        'worker: assign for a known execution; reporting its phase instead of running it again',
      );
      this.reports.report(known);
      return {};
    }
    // The execution is new here (a known one returned above), so its epoch must be above every mark.
    const fence = store.checkAndRaiseEpoch(
      plan.cards.map((c) => c.index),
      plan.lease_epoch,
      { strict: true },
    );
    if (!fence.ok) {
      this.reports.rejected(
        plan,
        'STALE_EPOCH',
        fence.recorded_epoch === plan.lease_epoch
          ? `card ${fence.card_index} already has lease epoch ${plan.lease_epoch}, for another execution`
          : `card ${fence.card_index} has seen lease epoch ${fence.recorded_epoch}, above this assign's ${plan.lease_epoch}`,
      );
      return {};
    }
    // Whatever the master believes, a card one of this worker's executions still holds is not free.
    const held = heldCardsProblem(plan, store.listUnfinishedExecutions());
    if (held !== null) {
      this.reports.rejected(plan, 'SETUP_FAILED', held);
      return {};
    }
    const problem = leasedCardsProblem(plan.cards, this.deps.latestCards()) ?? pinsProblem(plan.pins ?? []);
    if (problem !== null) {
      this.reports.rejected(plan, 'SETUP_FAILED', problem);
      return {};
    }
    const report = this.reports.report(store.recordExecution(plan, 'accepted'));
    return { after: () => this.startWhenAcknowledged(plan, report) };
  }

  /** cancel: refused below the cards' recorded epoch; a finished execution is re-reported. */
  handleCancel(msg: Sequenced<'cancel'>): Handled {
    const { store } = this.deps;
    const record = store.getExecution(msg.execution_id);
    if (record === null) return unknownExecution(msg.execution_id);
    const recorded = Math.max(...record.plan.cards.map((c) => store.getCardEpoch(c.index)));
    if (msg.lease_epoch < recorded) {
      return {
        error: {
          code: 'STALE_EPOCH',
          message: `cancel of ${msg.execution_id} carries lease epoch ${msg.lease_epoch}, below ${recorded} recorded for its cards; ignored`,
        },
      };
    }
    if (this.awaiting.has(msg.execution_id)) {
      // Accepted, never started: the master withdrew it (or its owner cancelled it) before it recorded
      // the acceptance. Nothing ran; it ends here.
      this.endUnstarted(msg.execution_id, `cancelled before it started: ${msg.reason}`);
      return {};
    }
    const run = this.running.get(msg.execution_id);
    if (run === undefined) {
      // Already finished (or left by a previous worker process and being cleaned up): say where it is.
      this.reports.report(record);
      return {};
    }
    this.deps.logger.info({ execution_id: msg.execution_id, reason: msg.reason }, 'worker: cancelling');
    if (run.lostCards === null) run.stopAsked = true;
    return { after: () => run.handle.cancel(msg.reason, { preempt: msg.preempt === true }) };
  }

  /**
   * A successful sample (docs/decisions/0046-mig-slices-as-cards.md §7): a run on this host whose leased
   * card the sample no longer lists, or lists with another uuid (a MIG instance destroyed or re-created
   * under it, a card off the bus), in `CARD_GONE_SAMPLES` successive samples, is stopped like a cancel
   * (SIGTERM, grace, SIGKILL) and its exit reported CARD_LOST with the cards named. A task cannot be
   * using a card that no longer exists, and a re-created instance at the same GI/CI ids would have the
   * same capability nodes its sandbox still binds. Runs the master already asked to stop are left to
   * that stop; Slurm jobs (whose cards are Slurm's) are left to Slurm.
   */
  cardsSampled(cards: readonly CardSample[]): void {
    for (const [id, run] of this.running) {
      if (run.handle.detach !== undefined || run.stopping || run.stopAsked || run.exited) continue;
      if (run.lostCards !== null) continue;
      const gone = goneCardsProblem(run.plan.cards, cards);
      run.missingSamples = gone === null ? 0 : run.missingSamples + 1;
      if (gone === null || run.missingSamples < CARD_GONE_SAMPLES) continue;
      run.lostCards = gone;
      this.deps.logger.error({ execution_id: id, detail: gone }, 'worker: stopping a run whose card is gone');
      run.handle.cancel(gone);
    }
  }

  /** query: the latest phase again, as a new sequenced report. */
  handleQuery(msg: Sequenced<'query'>): Handled {
    const record = this.deps.store.getExecution(msg.execution_id);
    if (record === null) return unknownExecution(msg.execution_id);
    this.reports.report(record);
    return {};
  }

  /**
   * Clean shutdown: cancels every running execution (SIGTERM, grace, SIGKILL), waits until their exits
   * are reported, then briefly for their cleanup receipts. An execution whose receipt is not in by then
   * stays `exited` in the store, and the next worker process finishes its cleanup check.
   */
  async stopAll(): Promise<void> {
    // Tasks that outlive the worker (Slurm jobs) are only let go: the next worker process resumes them
    // by job id. The others are stopped.
    const runs: Running[] = [];
    for (const [id, run] of this.running) {
      if (run.handle.detach === undefined) runs.push(run);
      else {
        run.handle.detach();
        this.running.delete(id);
      }
    }
    for (const run of runs) {
      run.stopping = true;
      run.handle.cancel('worker stopping');
    }
    await Promise.all(runs.map((r) => r.exitReported));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(runs.map((r) => r.settled)),
      new Promise((r) => {
        timer = setTimeout(r, STOP_CLEANUP_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
  }

  /**
   * Resumes an execution a previous worker process left with a task that outlives the worker (found by
   * the backend's recovery, e.g. slurm/recovery.ts, and known by `ref`): the executor watches it again
   * from where the backend has it, with the same reports as a fresh run.
   */
  resume(record: ExecutionRecord, ref: BackendRef): void {
    if (this.running.has(record.execution_id)) return;
    const { phase } = record;
    if (phase !== 'accepted' && phase !== 'started' && phase !== 'exited') return;
    const { executor, logger } = this.deps;
    const resumeRun = executor.resume;
    if (resumeRun === undefined) {
      logger.error({ execution_id: record.execution_id }, 'worker: this executor cannot resume a run');
      return;
    }
    this.run(record.plan, phase, (hooks) => resumeRun.call(executor, record.plan, ref, hooks));
  }

  /** The card indexes the other running executions hold (a MIG slice's siblings may be among them). */
  private cardsHeldBesides(id: string): ReadonlySet<number> {
    const held = new Set<number>();
    for (const [other, run] of this.running)
      if (other !== id) for (const card of run.plan.cards) held.add(card.index);
    return held;
  }

  /**
   * Runs `plan` from `from`, the phase recorded for it: `accepted` for a fresh run; for a resumed one
   * (`resume`), the phase the previous worker process recorded. `begin` starts (or resumes) it.
   */
  private run(
    plan: ExecutionPlan,
    from: 'accepted' | 'started' | 'exited' = 'accepted',
    begin: (hooks: ExecutionHooks) => ExecutionHandle = (hooks) => this.deps.executor.start(plan, hooks),
  ): void {
    const { outbox, logger } = this.deps;
    const id = plan.execution_id;
    const check = cardsCleanCheck(this.deps.sampler, plan.cards, plan.vram_clean_pct, () =>
      this.cardsHeldBesides(id),
    );
    // Logs take the log lane (link/log-lane.ts): a seq only at their fair turn, behind no report.
    const onLog = (stream: 'stdout' | 'stderr', offset: number, data: string) => {
      outbox.enqueueLog(id, stream, offset, data);
    };
    // The phase this process last recorded: each move below is compare-and-set on it (ADR 0014). A
    // resumed run goes on from the phase the previous worker process recorded.
    let phase: 'accepted' | 'started' | 'exited' = from;
    const handle = begin({
      onLog,
      maxLogBytes: this.logCap,
      onProgress: (news, record) => {
        const moved = this.reports.progress(id, news, record);
        if (moved) phase = 'started';
        return moved;
      },
      ...(check === undefined ? {} : { checkCardsClean: check }),
    });
    const failed = (step: string) => (err: unknown) => {
      // Only a store or outbox failure lands here (e.g. the store closed mid-shutdown); the record
      // stays unfinished and the next worker process reports it.
      logger.error(
        { execution_id: id, step, err: (err as Error)?.message },
        'worker: could not record a phase',
      );
    };
    const onStarted = (pid: number | null) => {
      if (pid === null) return;
      this.reports.started(id, pid);
      phase = 'started';
    };
    const onExited = (exit: ExecutionExit) => {
      // A resumed run whose exit the previous worker process recorded (and queued, outputs first):
      // only its cleanup receipt is left to report.
      entry.exited = true;
      if (phase === 'exited') return;
      const summary = exitSummary(exit, entry.stopping && exit.failure_reason === 'CANCELLED');
      this.reports.exited(plan, phase, cardLostSummary(summary, this.lostCardsAtExit(entry)), exit);
      phase = 'exited';
    };
    const exitReported = handle.started
      .then(onStarted)
      .catch(failed('started'))
      .then(() => handle.exited)
      .then(onExited)
      .catch(failed('exited'));
    const settled = exitReported
      .then(() => handle.done)
      .then((done) => this.reports.done(id, phase, done))
      .catch(failed('done'))
      .finally(() => this.running.delete(id));
    const entry: Running = {
      plan,
      handle,
      stopping: false,
      stopAsked: false,
      missingSamples: 0,
      lostCards: null,
      exited: false,
      exitReported,
      settled,
    };
    this.running.set(id, entry);
  }

  /**
   * Why a run's exit is CARD_LOST: the worker stopped it for a gone card, or (a run that failed on its
   * own, e.g. its CUDA call failed when the instance went) the latest sample already lacks one of its
   * cards. Never for a Slurm job, a stop the master asked for first, or a shutdown.
   */
  private lostCardsAtExit(run: Running): string | null {
    if (run.lostCards !== null) return run.lostCards;
    if (run.handle.detach !== undefined || run.stopping || run.stopAsked) return null;
    return goneCardsProblem(run.plan.cards, this.deps.latestCards());
  }
}

function unknownExecution(executionId: string): Handled {
  return {
    error: { code: 'UNKNOWN_EXECUTION', message: `execution ${executionId} is not known to this worker` },
  };
}
