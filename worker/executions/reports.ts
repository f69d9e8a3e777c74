import type { ExecutionPhase, ExecutionPlan, SlurmJobReport } from '../../src/contracts/worker-protocol.js';
import type { OutgoingBody } from '../link/outbox.js';
import type { ExecutionSummary } from '../store/local-store.js';

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

/** Joins the non-empty parts into one detail line, clipped to the protocol's limit. */
export function joinDetail(parts: ReadonlyArray<string | undefined | null>): string | undefined {
  const text = parts.filter((p): p is string => typeof p === 'string' && p !== '').join('; ');
  return text === '' ? undefined : clipDetail(text);
}

function clipDetail(text: string): string {
  return text.length <= MAX_DETAIL_CHARS ? text : `${text.slice(0, MAX_DETAIL_CHARS - 1)}…`;
}
