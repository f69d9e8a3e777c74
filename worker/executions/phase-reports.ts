import type { Logger } from 'pino';
import type { ExecutionPlan, FailureReason } from '../../src/contracts/worker-protocol.js';
import type { ReportedPhase } from '../../src/domain/machines/execution.js';
import type { OutboxSender } from '../link/outbox.js';
import type { ExecutionRecord, ExecutionSummary, LocalStore, OutboxEntry } from '../store/local-store.js';
import type { ExecutionExit, ExecutionResult, Executor } from './executor.js';
import { finalSummary, outputBody, phaseBody } from './reports.js';

/**
 * How an execution's phases are recorded and reported on this worker (docs/worker-protocol.md): each
 * move of the local record (compare-and-set on its phase, ADR 0014) and the report of its new phase are
 * queued in one transaction, so a crash between two commits never leaves a record moved with no report
 * queued for it. The execution manager (manager.ts) decides when; this says how.
 */
export class PhaseReports {
  constructor(
    private readonly deps: {
      readonly store: LocalStore;
      readonly outbox: OutboxSender;
      readonly logger: Logger;
      readonly executor: Pick<Executor, 'identify'>;
    },
  ) {}

  /**
   * One step of an execution's life: moves it `from` → `to` in the local store (compare-and-set) and
   * queues the report of its new phase. Call inside a store transaction, so the move and its report
   * commit together.
   */
  advance(
    executionId: string,
    from: ReportedPhase,
    to: ReportedPhase,
    result?: ExecutionSummary,
  ): OutboxEntry {
    return this.report(this.deps.store.moveExecution(executionId, from, to, result));
  }

  /** Queues the report of `record`'s phase as stored (a new, a re-reported or a rejected execution). */
  report(record: ExecutionRecord): OutboxEntry {
    return this.deps.outbox.enqueue(phaseBody(record));
  }

  /** An assign refused before anything ran: recorded `rejected` with why, and reported. */
  rejected(plan: ExecutionPlan, reason: FailureReason, detail: string): void {
    this.deps.logger.warn({ execution_id: plan.execution_id, reason, detail }, 'worker: assign rejected');
    const result: ExecutionSummary = {
      exit_code: null,
      signal: null,
      failure_reason: reason,
      outputs: [],
      detail,
    };
    this.report(this.deps.store.recordExecution(plan, 'rejected', result));
  }

  /** An accepted execution that never started ends: `exited` (CANCELLED) then `cleaned` (nothing ran). */
  withdrawn(executionId: string, detail: string): void {
    const { store, logger } = this.deps;
    logger.warn(
      { execution_id: executionId, detail },
      'worker: accepted execution withdrawn before it started',
    );
    const result: ExecutionSummary = {
      exit_code: null,
      signal: null,
      failure_reason: 'CANCELLED',
      outputs: [],
      detail,
    };
    store.transaction(() => {
      this.advance(executionId, 'accepted', 'exited', result);
      this.advance(executionId, 'exited', 'cleaned', result);
    });
  }

  /** Its process group runs: the pgid (and the process's identity) recorded with the move to `started`. */
  started(id: string, pgid: number): void {
    const { store, logger, executor } = this.deps;
    logger.info({ execution_id: id, pgid }, 'worker: execution started');
    const identity = executor.identify?.(pgid) ?? null;
    store.transaction(() => {
      store.setExecutionPgid(id, pgid, identity);
      this.advance(id, 'accepted', 'started');
    });
  }

  /**
   * The executor's news of a run: `record` writes the backend's facts, and the execution is reported at
   * its (possibly new) phase, in one transaction. Returns whether it moved the execution `accepted` →
   * `started` (compare-and-set on the stored phase).
   */
  progress(id: string, phase: 'accepted' | 'started', record: () => void): boolean {
    const { store } = this.deps;
    let moved = false;
    store.transaction(() => {
      record();
      const current = store.getExecution(id);
      if (current === null) return;
      if (phase === 'started' && current.phase === 'accepted') {
        this.advance(id, 'accepted', 'started');
        moved = true;
      } else this.report(current);
    });
    return moved;
  }

  /** Queues the run's logs, its outputs and then `exited`, in one transaction. */
  exited(
    plan: ExecutionPlan,
    from: 'accepted' | 'started',
    result: ExecutionSummary,
    exit: ExecutionExit,
  ): void {
    const { store, outbox, logger } = this.deps;
    const id = plan.execution_id;
    logger.info({ execution_id: id, ...result, outputs: result.outputs.length }, 'worker: execution exited');
    store.transaction(() => {
      // An ordinary task's log goes ahead of its exit; a flood's tail keeps its turns (log-lane.ts).
      outbox.enqueueLogsBeforeExit(id);
      // Outputs first: when the master sees `exited`, every output it lists has already arrived.
      for (const o of exit.outputs) outbox.enqueue(outputBody(plan, o));
      this.advance(id, from, 'exited', result);
    });
  }

  /**
   * The cleanup receipt: `cleaned`, or `cleanup_failed` when the executor could not confirm it. The move
   * and its report commit together, like every other phase.
   */
  done(id: string, from: 'accepted' | 'started' | 'exited', done: ExecutionResult): void {
    const { store, logger } = this.deps;
    const final = done.cleaned ? 'cleaned' : 'cleanup_failed';
    (done.cleaned ? logger.info : logger.error).call(
      logger,
      { execution_id: id, detail: done.cleanup_detail },
      `worker: execution ${final}`,
    );
    store.transaction(() => {
      const result = finalSummary(done, store.getExecution(id)?.result);
      // From `exited` only: when that report could not be recorded, the record stays unfinished and
      // the next worker process reports it, rather than jumping over `exited` here.
      this.advance(id, from, final, result);
    });
  }
}
