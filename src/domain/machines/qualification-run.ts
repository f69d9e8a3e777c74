import { applyTransition, type TransitionResult, type TransitionTable } from './state-machine.js';

/**
 * Qualification run state machine (docs/state-machines.md). A run is created RUNNING and leaves it exactly
 * once, through `moveQualificationRun` (src/broker/machines/qualification-run.ts, `applyMove`:
 * compare-and-set and an audit row `qualification_run.<event>`).
 *
 * States:
 * - `RUNNING`: the runner drives the ladder; the run's cards are reserved for its own tasks.
 * - `PASSED` (terminal): every rung and post-condition checked out; the cards went back to the pool.
 * - `FAILED` (terminal): a check failed (the evidence names it); the cards stay cordoned.
 * - `INCONCLUSIVE` (terminal): nothing failed, but not every requested count could run; the cards stay
 *   cordoned.
 * - `CANCELLED` (terminal): stopped before it could be judged (cancel_qualification, or the master shut
 *   down or restarted); no evidence; the cards stay cordoned.
 */
export const QUALIFICATION_RUN_STATES = ['RUNNING', 'PASSED', 'FAILED', 'INCONCLUSIVE', 'CANCELLED'] as const;
/** A qualification run state. */
export type QualificationRunState = (typeof QUALIFICATION_RUN_STATES)[number];

/** Events that end a run: the evidence's verdict, or a cancel. */
export const QUALIFICATION_RUN_EVENTS = ['pass', 'fail', 'inconclusive', 'cancel'] as const;
/** A qualification run event. */
export type QualificationRunEvent = (typeof QUALIFICATION_RUN_EVENTS)[number];

/** The qualification run transition table; docs/state-machines.md shows it. */
export const QUALIFICATION_RUN_TABLE: TransitionTable<QualificationRunState, QualificationRunEvent> = {
  RUNNING: { pass: 'PASSED', fail: 'FAILED', inconclusive: 'INCONCLUSIVE', cancel: 'CANCELLED' },
  PASSED: {},
  FAILED: {},
  INCONCLUSIVE: {},
  CANCELLED: {},
};

/** The event an evidence document's verdict is. */
export function verdictEvent(verdict: 'PASSED' | 'FAILED' | 'INCONCLUSIVE'): QualificationRunEvent {
  return verdict === 'PASSED' ? 'pass' : verdict === 'FAILED' ? 'fail' : 'inconclusive';
}

/** Applies an event to a run state. */
export function transitionQualificationRun(
  state: QualificationRunState,
  event: QualificationRunEvent,
): TransitionResult<QualificationRunState, QualificationRunEvent> {
  return applyTransition(QUALIFICATION_RUN_TABLE, state, event);
}
