import type { ExecutionPhase as ReportedPhase } from '../../contracts/worker-protocol.js';
import type { ExecutionPhase } from './execution.js';
import type { LeaseState } from './lease.js';
import { type TaskEvent, type TaskState, WORKER_UNREACHABLE } from './task.js';

/**
 * What a worker's `hello` means for the master's records (docs/worker-protocol.md; docs/architecture.md "The
 * hub and reconcile"). Pure: `reconcileHello(snapshot)` returns the decisions as data, like `decide(snapshot,
 * now)` in scheduling/decide.ts; src/broker/workers/session.ts applies them in one transaction and the hub
 * only sends. No clock: nothing here depends on time (the grace for an offline worker is the sweeper's
 * business, src/broker/loops/liveness.ts).
 *
 * Decisions, in the order they are applied:
 *   ack_outbox_through  the worker processed the master's messages up to `seq` of that master boot
 *                       (`master_marks`): they leave the outbox and are not resent;
 *   raise_epoch         the worker saw `epoch` on card `index` (`card_epochs`): every later lease on
 *                       that card must be above it, even if this master never issued it (a restored
 *                       database);
 *   mark_lost           the master holds the execution unfinished on this worker, hello listed every
 *                       execution the worker knows, and it is not among them, and its assign is not on
 *                       its way (acknowledged, or at or below the worker's `master_marks`, which the
 *                       same hello acknowledges): its fate is unknown (task RECONCILIATION_REQUIRED, lease
 *                       QUARANTINED). Leaving it running would hold its cards for ever, since an online
 *                       worker is never swept;
 *   query               the same, but hello's list was cut at HELLO_MAX_EXECUTIONS: ask the worker;
 *   resume              the master gave up on the execution only because its worker stopped answering
 *                       (task RECONCILIATION_REQUIRED with reason `worker_unreachable`, lease QUARANTINED),
 *                       and the worker lists it alive (`accepted` or `started`) under the lease's epoch,
 *                       with no higher epoch seen on its cards: the task goes back to RUNNING (or ASSIGNED
 *                       when the master never heard it start) and the lease to ACTIVE (docs/operations.md "Partitions").
 *                       Any other cause (an illegal report, an execution the worker did not know) is
 *                       not resumed: there the worker and the master disagree;
 *   hold_cards          the cards the worker's own unfinished executions hold: never granted, whatever
 *                       the master's records say. Always last, exactly once.
 * Otherwise an execution the worker listed, or whose assign is still on its way, is left alone: the
 * worker's reports (resent from its outbox) move it.
 */

/** Phases after which an execution the worker lists no longer holds its cards. */
const FINISHED_ON_WORKER: ReadonlySet<ReportedPhase> = new Set(['rejected', 'cleaned', 'cleanup_failed']);

/** Phases in which the worker still has an execution alive that has not ended: what `resume` takes. */
const ALIVE_ON_WORKER: ReadonlySet<ReportedPhase> = new Set(['accepted', 'started']);

/** What one `hello` and the master's own records say about a worker, at the moment it says hello. */
export interface HelloSnapshot {
  /** The executions hello listed (every unfinished one first, then the most recent finished ones). */
  readonly reported: ReadonlyArray<{
    readonly execution_id: string;
    readonly lease_epoch: number;
    readonly phase: ReportedPhase;
    readonly cards: readonly number[];
  }>;
  /** Whether hello's list is complete (shorter than HELLO_MAX_EXECUTIONS). */
  readonly listed_all: boolean;
  /**
   * The master's unfinished executions on this worker, each with where its `assign` sits in the
   * master's sequence while the outbox still holds it unacknowledged (null otherwise).
   */
  readonly unfinished: ReadonlyArray<{
    readonly execution_id: string;
    readonly phase: ExecutionPhase;
    readonly pending_assign: { readonly boot_id: string; readonly seq: number } | null;
    readonly lease_epoch: number;
    /** Its task's state, and the code of the task's `reason` (null when none). */
    readonly task_state: TaskState;
    readonly task_reason: string | null;
    /** Its lease's state and card indexes. */
    readonly lease_state: LeaseState;
    readonly cards: readonly number[];
  }>;
  /** hello.master_marks. */
  readonly master_marks: ReadonlyArray<{ readonly boot_id: string; readonly seq: number }>;
  /** hello.card_epochs. */
  readonly card_epochs: ReadonlyArray<{ readonly index: number; readonly epoch: number }>;
}

/** One decision; see the module comment. */
export type ReconcileAction =
  | { readonly kind: 'ack_outbox_through'; readonly boot_id: string; readonly seq: number }
  | { readonly kind: 'raise_epoch'; readonly index: number; readonly epoch: number }
  | { readonly kind: 'mark_lost'; readonly execution_id: string; readonly reason: string }
  | { readonly kind: 'query'; readonly execution_id: string }
  | {
      readonly kind: 'resume';
      readonly execution_id: string;
      /** `worker_returned` (back to RUNNING) or `worker_returned_unstarted` (back to ASSIGNED). */
      readonly event: Extract<TaskEvent, 'worker_returned' | 'worker_returned_unstarted'>;
      /** The phase the worker listed it in. */
      readonly phase: ReportedPhase;
    }
  | { readonly kind: 'hold_cards'; readonly cards: readonly number[] };

/** Decides what a hello changes; see the module comment. */
export function reconcileHello(snapshot: HelloSnapshot): ReconcileAction[] {
  const actions: ReconcileAction[] = [];
  for (const m of snapshot.master_marks)
    actions.push({ kind: 'ack_outbox_through', boot_id: m.boot_id, seq: m.seq });
  for (const c of snapshot.card_epochs) actions.push({ kind: 'raise_epoch', index: c.index, epoch: c.epoch });
  const known = new Map(snapshot.reported.map((e) => [e.execution_id, e]));
  const marks = new Map<string, number>();
  for (const m of snapshot.master_marks) marks.set(m.boot_id, Math.max(m.seq, marks.get(m.boot_id) ?? 0));
  for (const e of snapshot.unfinished) {
    const listed = known.get(e.execution_id);
    if (listed !== undefined) {
      const event = resumeEvent(e, listed, snapshot.card_epochs);
      if (event !== null)
        actions.push({ kind: 'resume', execution_id: e.execution_id, event, phase: listed.phase });
      continue;
    }
    // On its way: its assign is unacknowledged, and the worker's marks do not say it processed it.
    const pending = e.pending_assign;
    if (e.phase === 'assigned' && pending !== null && pending.seq > (marks.get(pending.boot_id) ?? 0))
      continue;
    actions.push(
      snapshot.listed_all
        ? {
            kind: 'mark_lost',
            execution_id: e.execution_id,
            reason: `execution ${e.execution_id} is not known to the worker`,
          }
        : { kind: 'query', execution_id: e.execution_id },
    );
  }
  actions.push({ kind: 'hold_cards', cards: heldCards(snapshot.reported) });
  return actions;
}

/**
 * Whether a listed execution resumes (see `resume` in the module comment), and with which task event:
 * null unless the master parked it only for silence and the worker vouches for it under the same epoch.
 * A worker that saw a higher epoch on one of its cards was told of a later lease there, so its word about
 * this one is not taken. `started` on the master stays `started`: a worker listing such an execution as
 * `accepted` contradicts the master and is not resumed.
 */
function resumeEvent(
  e: HelloSnapshot['unfinished'][number],
  listed: HelloSnapshot['reported'][number],
  cardEpochs: HelloSnapshot['card_epochs'],
): Extract<TaskEvent, 'worker_returned' | 'worker_returned_unstarted'> | null {
  if (e.task_state !== 'RECONCILIATION_REQUIRED' || e.task_reason !== WORKER_UNREACHABLE) return null;
  if (e.lease_state !== 'QUARANTINED' || listed.lease_epoch !== e.lease_epoch) return null;
  if (!ALIVE_ON_WORKER.has(listed.phase)) return null;
  if (e.phase === 'started' && listed.phase !== 'started') return null;
  if (e.phase !== 'assigned' && e.phase !== 'accepted' && e.phase !== 'started') return null;
  if (cardEpochs.some((c) => e.cards.includes(c.index) && c.epoch > e.lease_epoch)) return null;
  return e.phase === 'started' ? 'worker_returned' : 'worker_returned_unstarted';
}

/**
 * The cards the worker's own unfinished executions hold (hello's list), sorted: what `hold_cards`
 * carries, and what the fleet learns when the hello could not be stored (out of disk space).
 */
export function heldCards(reported: HelloSnapshot['reported']): number[] {
  const held = new Set<number>();
  for (const e of reported) if (!FINISHED_ON_WORKER.has(e.phase)) for (const c of e.cards) held.add(c);
  return [...held].sort((a, b) => a - b);
}

/**
 * Where a held lease's execution stands for an operator about to reconcile it (docs/operations.md "Partitions"), from
 * the master's record of its phase and what the worker says right now:
 *   worker_unreachable  the execution may still have a process (assigned, accepted, started) and its
 *                       worker is offline: the task may be running there, and comes back by itself if
 *                       the worker does;
 *   running             the same, but the worker is online and still holds the lease's cards for an
 *                       unfinished execution (hello, then every sample): reconciling would kill it;
 *   not_running         the execution ended (exited or later), or the worker is online and holds none
 *                       of the cards.
 */
export type ExecutionWhereabouts = 'worker_unreachable' | 'running' | 'not_running';

/** Phases in which the master may still have a process of the execution on the worker. */
const MAY_RUN: ReadonlySet<ExecutionPhase> = new Set(['assigned', 'accepted', 'started']);

/** See ExecutionWhereabouts. Pure. */
export function executionWhereabouts(facts: {
  readonly phase: ExecutionPhase | null;
  readonly worker_online: boolean;
  readonly lease_cards: readonly number[];
  readonly held_cards: readonly number[];
}): ExecutionWhereabouts {
  if (facts.phase === null || !MAY_RUN.has(facts.phase)) return 'not_running';
  if (!facts.worker_online) return 'worker_unreachable';
  return facts.lease_cards.some((c) => facts.held_cards.includes(c)) ? 'running' : 'not_running';
}
