import { applyTransition, type TransitionResult, type TransitionTable } from './state-machine.js';

/**
 * The execution machine: where one assignment of a task to a worker stands, as the worker reports it
 * (docs/worker-protocol.md). States are the phases; the event that moves it is the report of
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
 * `reconcile_task` giving up on a live execution (its cleanup was never confirmed), or `withdraw`, the
 * master taking back an assign whose acceptance it never recorded from a worker that fell silent (issue
 * 40, item 3: such a worker starts nothing the master has not acknowledged, so the task may go elsewhere).
 * A worker can never send either: its reports are phases (the protocol schema), and the worker's own
 * moves are phases.
 */
export type ExecutionEvent = ReportedPhase | 'reconcile' | 'withdraw';

/** Which reported phase may follow which (and where `reconcile` leads); everything else is refused. */
export const EXECUTION_TABLE: TransitionTable<ExecutionPhase, ExecutionEvent> = {
  assigned: { accepted: 'accepted', rejected: 'rejected', reconcile: 'cleanup_failed', withdraw: 'rejected' },
  accepted: { started: 'started', exited: 'exited', reconcile: 'cleanup_failed' },
  started: { exited: 'exited', reconcile: 'cleanup_failed' },
  exited: { cleaned: 'cleaned', cleanup_failed: 'cleanup_failed', reconcile: 'cleanup_failed' },
  cleanup_failed: { cleaned: 'cleaned' },
  rejected: {},
  cleaned: {},
};

/** How far along each phase is, for telling a duplicate from a jump. */
const RANK: Readonly<Record<ExecutionPhase, number>> = {
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

/** The phases among `events` (what a worker may report or record; `reconcile` and `withdraw` are the master's). */
export function reportedOnly(events: readonly ExecutionEvent[]): ReportedPhase[] {
  return events.filter((e): e is ReportedPhase => e !== 'reconcile' && e !== 'withdraw');
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

/**
 * Whether the master may withdraw an execution's assign and requeue its task elsewhere (docs/operations.md
 * "Partitions"): the master never recorded the worker's acceptance (`assigned`), the worker is offline, and
 * its hello said it starts nothing before the master acknowledged the acceptance (`starts_after_ack`) —
 * so it cannot have started, and cannot start after this, since its `accepted` report is refused from
 * now on and a `cancel` follows. The task and lease tables decide the rest (`requeued`, `withdrawn`).
 * Pure.
 */
export function withdrawable(f: {
  readonly phase: ExecutionPhase;
  readonly worker_offline: boolean;
  readonly starts_after_ack: boolean;
}): boolean {
  return f.phase === 'assigned' && f.worker_offline && f.starts_after_ack;
}

/** What decides when the master stops waiting for an exited execution's cleanup receipt. */
export interface ReceiptClock {
  /** When the master recorded the exit (the execution's `updated_at` in phase `exited`). */
  readonly exited_at: number;
  /** The last time the master refused worker messages for lack of disk space (null: never). */
  readonly refused_at: number | null;
  /**
   * Since when the worker has been reachable without a break: the `hello` of its current session;
   * null while it is offline (or has not said hello since the master started).
   */
  readonly reachable_since: number | null;
  /** How long the receipt may take once the worker can send it: cleanup timeout + two offline windows. */
  readonly window_ms: number;
}

/**
 * When the master gives up on a cleanup receipt (quarantines the lease, fails the task
 * CLEANUP_UNCONFIRMED), or null while it must not (docs/operations.md "Partitions"). The receipt is the worker's
 * second message about an ended run, sent milliseconds after the exit: a partition that starts between
 * the two holds it in the worker's outbox until the link heals. So the window runs only while the worker
 * is reachable: never while it is offline, and counted from the latest of the exit, its reconnection and
 * the master's last refusal of its messages (a full disk). A restart of the window at
 * each reconnection, rather than a pause, is deliberate: the outbox resends the receipt at once after a
 * hello, so a worker that keeps reconnecting without sending one holds its cards (RELEASING, never free on
 * a guess) but nothing else. Pure.
 */
export function receiptDeadline(c: ReceiptClock): number | null {
  if (c.reachable_since === null) return null;
  return Math.max(c.exited_at, c.refused_at ?? c.exited_at, c.reachable_since) + c.window_ms;
}
