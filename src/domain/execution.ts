import { applyTransition, type TransitionResult, type TransitionTable } from './state-machine.js';

/**
 * The execution machine: where one assignment of a task to a worker stands, as the worker reports it
 * (docs/worker-protocol.md; issue 10, row 1). States are the phases; the event that moves it is the report of
 * the next phase, so the table says which report may follow which.
 *
 *   assigned        the master sent `assign`
 *   accepted        the worker checked the plan (fence, pins, setup) and will run it
 *   rejected        the worker refused before any side effect (final)
 *   started         the task's process is running
 *   exited          the task ended; exit code, signal and outputs are known
 *   cleaned         cleanup receipt: nothing of the task is left and the cards are clean (final)
 *   cleanup_failed  no receipt in time; the lease is quarantined (a late `cleaned` still releases it)
 *
 * `started` may be skipped (a task that could not be spawned exits without starting), nothing else. A
 * report of a phase already passed is a duplicate (acknowledged, ignored); any other report is illegal:
 * refused, and the task — whose worker now disagrees with the master — goes to RECONCILIATION_REQUIRED.
 *
 * The worker keeps its own record of each execution (worker/store/local-store.ts) and moves it through the
 * same table (`moveExecutionPhase`, ADR 0014): there `assigned` stands for "assign received, nothing
 * recorded yet", so the first record is a move out of `assigned` (to `accepted` or `rejected`), and a
 * restarted worker's report of a lost run (`accepted`/`started` → `exited`, WORKER_LOST) is an ordinary
 * row of the table.
 */
export type ExecutionPhase =
  | 'assigned'
  | 'accepted'
  | 'rejected'
  | 'started'
  | 'exited'
  | 'cleaned'
  | 'cleanup_failed';

/** The phases a worker may report (every phase but `assigned`, which only the master sets). */
export type ReportedPhase = Exclude<ExecutionPhase, 'assigned'>;

/**
 * What moves an execution: the report of a phase, or — on the master only — `reconcile`, an operator's
 * `reconcile_task` giving up on a live execution (its cleanup was never confirmed). A worker can never
 * send `reconcile`: its reports are phases (the protocol schema), and the worker's own moves are phases.
 */
export type ExecutionEvent = ReportedPhase | 'reconcile';

/** Which reported phase may follow which (and where `reconcile` leads); everything else is refused. */
export const EXECUTION_TABLE: TransitionTable<ExecutionPhase, ExecutionEvent> = {
  assigned: { accepted: 'accepted', rejected: 'rejected', reconcile: 'cleanup_failed' },
  accepted: { started: 'started', exited: 'exited', reconcile: 'cleanup_failed' },
  started: { exited: 'exited', reconcile: 'cleanup_failed' },
  exited: { cleaned: 'cleaned', cleanup_failed: 'cleanup_failed', reconcile: 'cleanup_failed' },
  cleanup_failed: { cleaned: 'cleaned' },
  rejected: {},
  cleaned: {},
};

/** How far along each phase is, for telling a duplicate from a jump. */
const RANK: Record<ExecutionPhase, number> = {
  assigned: 0,
  accepted: 1,
  rejected: 1,
  started: 2,
  exited: 3,
  cleanup_failed: 4,
  cleaned: 5,
};

/** What to do with one report. */
export type ExecutionStep =
  | { kind: 'apply'; from: ExecutionPhase; to: ExecutionPhase }
  | { kind: 'duplicate' }
  | { kind: 'illegal'; from: ExecutionPhase; reported: ReportedPhase; allowed: ReportedPhase[] };

/**
 * Decides what a report of `reported` means for an execution at `current`. Pure.
 *  - apply: the table allows it;
 *  - duplicate: the execution already is at or past that phase on the same path (a resent report);
 *  - illegal: a jump over a phase, a phase off the path (`rejected` after `accepted`, anything after a
 *    final phase that is not its duplicate), which no honest worker sends.
 */
export function executionStep(current: ExecutionPhase, reported: ReportedPhase): ExecutionStep {
  const moved = applyTransition(EXECUTION_TABLE, current, reported);
  if (moved.ok) return { kind: 'apply', from: current, to: moved.to };
  if (reported === current) return { kind: 'duplicate' };
  const offPath = (reported === 'rejected') !== (current === 'rejected');
  if (!offPath && RANK[reported] < RANK[current]) return { kind: 'duplicate' };
  return { kind: 'illegal', from: current, reported, allowed: reportedOnly(moved.allowed) };
}

/** The phases among `events` (what a worker may report or record; `reconcile` is the master's). */
export function reportedOnly(events: readonly ExecutionEvent[]): ReportedPhase[] {
  return events.filter((e): e is ReportedPhase => e !== 'reconcile');
}

/**
 * One move of an execution record that its owner makes itself (the worker's local record): only what
 * the table lists. Unlike `executionStep`, a repeat is not a duplicate to ignore: the worker never sends
 * itself a phase twice, so anything the table does not list is refused. Pure.
 */
export function moveExecutionPhase(
  from: ExecutionPhase,
  to: ReportedPhase,
): TransitionResult<ExecutionPhase, ReportedPhase> {
  const t = applyTransition(EXECUTION_TABLE, from, to);
  return t.ok ? { ...t, event: to } : { ...t, event: to, allowed: reportedOnly(t.allowed) };
}

/** Applies any execution event (a reported phase or `reconcile`) to a phase; the master's moves. Pure. */
export function transitionExecution(
  from: ExecutionPhase,
  event: ExecutionEvent,
): TransitionResult<ExecutionPhase, ExecutionEvent> {
  return applyTransition(EXECUTION_TABLE, from, event);
}
