import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import type { ReportedPhase } from '../../src/domain/machines/execution.js';
import type { ExecutionRecord, ExecutionSummary, LocalStore } from '../../worker/store/local-store.js';

/** The path the worker itself takes to each phase (the honest rows of EXECUTION_TABLE). */
const PATH_TO: Record<ReportedPhase, readonly ReportedPhase[]> = {
  accepted: ['accepted'],
  rejected: ['rejected'],
  started: ['accepted', 'started'],
  exited: ['accepted', 'started', 'exited'],
  cleaned: ['accepted', 'started', 'exited', 'cleaned'],
  cleanup_failed: ['accepted', 'started', 'exited', 'cleanup_failed'],
};

/**
 * Puts a new execution at `phase` in a worker's local store the way the worker would get there, one
 * table move at a time (the store has no other way in); `result` goes with the last move.
 */
export function seedExecution(
  store: LocalStore,
  plan: ExecutionPlan,
  phase: ReportedPhase,
  result?: ExecutionSummary,
): ExecutionRecord {
  const [first, ...rest] = PATH_TO[phase];
  const last = (p: ReportedPhase) => (p === phase ? result : undefined);
  let record = store.recordExecution(plan, first as 'accepted' | 'rejected', last(first!));
  for (const to of rest) record = store.moveExecution(plan.execution_id, record.phase, to, last(to));
  return record;
}
