import type { ExecutionPhase, ExecutionPlan, SlurmJobReport } from '../../src/contracts/worker-protocol.js';
import type { OutgoingBody } from '../link/outbox.js';
import type { ExecutionSummary } from '../store/local-store.js';
import type { CollectedOutput } from '../task-io/outputs.js';
import type { ExecutionExit, ExecutionResult } from './executor.js';

/**
 * How the worker reports an execution's phase: one builder, so a first report and a re-report (after a
 * re-delivered assign, a query, or a cancel of a finished execution) always carry the same fields.
 */

/** The `detail` field holds at most 4096 characters. */
const MAX_DETAIL_CHARS = 4096;

/**
 * The `execution` message for `record`'s phase. Phases after `exited` repeat the exit's fields
 * (exit_code, signal, failure_reason, outputs), so the latest report alone tells the whole outcome;
 * `detail` is the latest phase's (the cleanup receipt for cleaned / cleanup_failed).
 */
export function phaseBody(record: {
  plan: ExecutionPlan;
  phase: ExecutionPhase;
  result: ExecutionSummary | null;
  /** Slurm workers: the job behind the execution, sent with every phase so the master never lacks it. */
  slurm?: SlurmJobReport | null;
}): OutgoingBody {
  const { plan, result } = record;
  return {
    type: 'execution',
    execution_id: plan.execution_id,
    task_id: plan.task_id,
    lease_epoch: plan.lease_epoch,
    phase: record.phase,
    ...(result === null
      ? {}
      : {
          exit_code: result.exit_code,
          signal: result.signal,
          failure_reason: result.failure_reason,
          outputs: [...result.outputs],
          ...(result.detail ? { detail: clipDetail(result.detail) } : {}),
        }),
    ...(record.slurm == null ? {} : { slurm: record.slurm }),
  };
}

/** The `output` message carrying one collected output file of `plan`'s execution. */
export function outputBody(plan: ExecutionPlan, o: CollectedOutput): OutgoingBody {
  return {
    type: 'output',
    execution_id: plan.execution_id,
    lease_epoch: plan.lease_epoch,
    path: o.path,
    size: o.size,
    sha256: o.sha256,
    content_base64: o.content.toString('base64'),
  };
}

/** Joins the non-empty parts into one detail line, clipped to the protocol's limit. */
export function joinDetail(parts: ReadonlyArray<string | undefined | null>): string | undefined {
  const text = parts.filter((p): p is string => typeof p === 'string' && p !== '').join('; ');
  return text === '' ? undefined : clipDetail(text);
}

/**
 * What an `exited` report records of the executor's exit. `stopped`: the worker itself stopped the task
 * (clean shutdown), so a CANCELLED exit reads WORKER_LOST.
 */
export function exitSummary(exit: ExecutionExit, stopped: boolean): ExecutionSummary {
  return {
    exit_code: exit.exit_code,
    signal: exit.signal,
    failure_reason: stopped ? 'WORKER_LOST' : exit.failure_reason,
    outputs: exit.outputs.map((o) => ({ path: o.path, size: o.size, sha256: o.sha256 })),
    ...optionalDetail(
      joinDetail([
        stopped ? 'the worker stopped while the task ran' : undefined,
        exit.setup_error,
        ...(exit.limits_detail ?? []),
        ...exit.output_errors,
        ...exit.log_errors,
      ]),
    ),
  };
}

/**
 * What the final report (cleaned / cleanup_failed) records: the exit as reported (`reported`, with
 * WORKER_LOST on a stop), falling back to the executor's own, plus the cleanup receipt.
 */
export function finalSummary(
  done: ExecutionResult,
  reported: ExecutionSummary | null | undefined,
): ExecutionSummary {
  const exit: ExecutionSummary = reported ?? {
    exit_code: done.exit_code,
    signal: done.signal,
    failure_reason: done.failure_reason,
    outputs: done.outputs.map((o) => ({ path: o.path, size: o.size, sha256: o.sha256 })),
  };
  // A run stopped for a gone card keeps the card named ahead of the receipt (which cannot confirm it).
  const detail =
    exit.failure_reason === 'CARD_LOST' && exit.detail !== undefined
      ? clipDetail(`${exit.detail}; cleanup: ${done.cleanup_detail}`)
      : done.cleanup_detail;
  return { ...exit, cleaned: done.cleaned, detail };
}

function optionalDetail(detail: string | undefined): { detail?: string } {
  return detail === undefined ? {} : { detail };
}

function clipDetail(text: string): string {
  return text.length <= MAX_DETAIL_CHARS ? text : `${text.slice(0, MAX_DETAIL_CHARS - 1)}…`;
}
