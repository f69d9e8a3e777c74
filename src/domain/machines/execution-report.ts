import type {
  FailureReason,
  OutputRecord,
  SlurmBinding,
  SlurmJobReport,
  WorkerMessage,
} from '../../contracts/worker-protocol.js';
import { type ExecutionPhase, executionStep, type ReportedPhase } from './execution.js';
import { type LeaseEvent, type LeaseState, leaseAccepts } from './lease.js';
import {
  cleanedEvent,
  exitFailureWithPreemption,
  type TaskEvent,
  type TaskState,
  taskAccepts,
  WORKER_UNREACHABLE,
} from './task.js';

/**
 * What a worker's `execution` report means for the master's records (docs/state-machines.md, docs/worker-protocol.md). Pure:
 * `reactToReport(snapshot, report)` returns the reactions as data, like `reconcileHello` in
 * worker-reconcile.ts; src/broker/workers/reports.ts reads the snapshot and applies the reactions in one
 * transaction, each move through its machine (compare-and-set, audit row). The time is in the snapshot.
 *
 * The steps, in order (the reactions come out in the order they are applied):
 *  1. fence: the report must name an execution of the session's worker (else NOT_FOUND), carry its
 *     lease_epoch (else STALE_EPOCH) and name its task (else INVALID_INPUT), and the
 *     execution must not be `rejected` (rejected by the worker, or withdrawn by the master: STALE_EPOCH,
 *     a worker then ends it unstarted). A refusal is the only reaction: nothing is known to have
 *     happened, so nothing changes;
 *  2. Slurm bookkeeping: the job behind it is recorded whatever the phase step says (a repeated
 *     `accepted` carries a changed pending reason); a binding once known is never dropped, and the
 *     first one is audited;
 *  3. a `cleaned` after the master stopped waiting (the sweeper quarantined the lease and failed the
 *     task CLEANUP_UNCONFIRMED): the cards are proven clean, so the quarantined lease is released and
 *     the task keeps its terminal state; a lease an operator already released is left alone;
 *  4. the execution table (execution.ts) decides: a duplicate is ignored; an illegal report marks the
 *     execution lost (task RECONCILIATION_REQUIRED, lease QUARANTINED: the worker and the master
 *     disagree, so neither its outcome nor its cards can be trusted) and is answered INVALID_STATE;
 *  5. a legal phase moves the task and the lease as the phase says (each only where its table allows
 *     the event: a late report leaves a terminal task alone), then the execution; `rejected` and
 *     `cleaned` give the fleet back the cards the worker held for it.
 *
 * Reactions:
 *   refuse          throw this error; nothing changes (step 1)
 *   record_slurm    store the Slurm job report (binding kept from before when the report has none)
 *   slurm_bound     audit the first binding of the job
 *   move_task       apply the task event with these changes and audit data
 *   task_unmoved    the task's table does not take the event from its state: log, change nothing
 *   move_lease      apply the lease event with this reason
 *   move_execution  move the execution to the reported phase with these changes
 *   mark_lost       the execution's fate is unknown (markExecutionLost)
 *   answer          return this error to the worker after committing the reactions before it
 *   release_held    the fleet stops holding these cards for the worker
 *   resume          the task was parked only because its worker fell silent (RECONCILIATION_REQUIRED,
 *                   reason `worker_unreachable`, lease QUARANTINED) and the worker now reports it
 *                   `accepted` or `started` (an assign that reached it after the heal, or a report held
 *                   back by the partition): task back to ASSIGNED and lease to ACTIVE (resumeExecution),
 *                   before the phase's own moves — as a hello that lists it alive does (docs/operations.md "Partitions")
 */

/** A worker's `execution` message. */
export type ExecutionReport = Extract<WorkerMessage, { type: 'execution' }>;

/** The master's records about the execution a report names, read in the report's transaction. */
export interface ReportRecords {
  readonly execution: {
    readonly id: string;
    readonly task_id: string;
    readonly worker_id: string;
    readonly lease_epoch: number;
    readonly phase: ExecutionPhase;
    readonly failure_reason: FailureReason | null;
  };
  /** The binding of its Slurm job as recorded before this report (null: none, or not a Slurm job). */
  readonly slurm_binding: SlurmBinding | null;
  readonly task: {
    readonly state: TaskState;
    readonly desired: 'run' | 'cancel';
    readonly failure_reason: string | null;
    /** The code of the task's `reason` (null when none): `worker_unreachable` for a task parked for silence. */
    readonly reason: string | null;
    /** The outputs its spec declares. */
    readonly outputs: ReadonlyArray<{ readonly path: string; readonly required: boolean }>;
  };
  readonly lease: { readonly state: LeaseState; readonly cards: readonly number[] };
  /** Whether the scheduler asked this execution's lease to give its cards back (a preemption). */
  readonly preempting: boolean;
  /** The outputs the master stored for the execution (uploads whose size and sha256 it checked). */
  readonly stored_outputs: readonly OutputRecord[];
}

/** What the master knows when a report arrives. */
export interface ReportSnapshot {
  /** The worker the session is authenticated as (never one a message names). */
  readonly worker_id: string;
  /** Null when the master has no execution by the reported id. */
  readonly records: ReportRecords | null;
  /** When the report is applied (a `started` task's started_at). */
  readonly now: number;
}

/** A refusal: an error code, its message and a hint for the worker. */
export interface ReportRefusal {
  readonly code: 'NOT_FOUND' | 'STALE_EPOCH' | 'INVALID_INPUT';
  readonly message: string;
  readonly hint: string;
}

/** Fields a report sets on the execution besides its phase. */
export interface ReportedChanges {
  readonly exit_code?: number | null;
  readonly signal?: string | null;
  readonly failure_reason?: FailureReason | null;
  readonly outputs?: OutputRecord[];
  readonly detail?: string | null;
}

/** Fields a report sets on the task besides its state. */
export interface ReportedTaskChanges {
  readonly exit_code?: number | null;
  readonly signal?: string | null;
  readonly failure_reason?: string | null;
  readonly started_at?: number | null;
  /** A preempted task's reason once it is queued again. */
  readonly reason?: Record<string, unknown>;
}

/** One reaction; see the module comment. */
export type ReportReaction =
  | ({ readonly kind: 'refuse' } & ReportRefusal)
  | { readonly kind: 'record_slurm'; readonly slurm: SlurmJobReport }
  | { readonly kind: 'slurm_bound'; readonly job_id: string; readonly binding: SlurmBinding }
  | {
      readonly kind: 'move_task';
      readonly event: TaskEvent;
      readonly changes: ReportedTaskChanges;
      readonly data: Readonly<Record<string, unknown>>;
    }
  | { readonly kind: 'task_unmoved'; readonly event: TaskEvent; readonly state: TaskState }
  | { readonly kind: 'move_lease'; readonly event: LeaseEvent; readonly reason: string | null }
  | { readonly kind: 'move_execution'; readonly phase: ReportedPhase; readonly changes: ReportedChanges }
  | { readonly kind: 'mark_lost'; readonly reason: string; readonly reported: ReportedPhase }
  | {
      readonly kind: 'answer';
      readonly code: 'INVALID_STATE';
      readonly message: string;
      readonly hint: string;
    }
  | { readonly kind: 'release_held'; readonly cards: readonly number[] }
  | {
      readonly kind: 'resume';
      readonly event: Extract<TaskEvent, 'worker_returned_unstarted'>;
      readonly phase: ReportedPhase;
    };

/**
 * Step 1's first two checks, shared with output uploads: null when the report may be read, else why
 * not. `execution` is the master's record of the reported id (null: none).
 */
export function fenceReport(
  workerId: string,
  execution: { readonly worker_id: string; readonly lease_epoch: number } | null,
  report: { readonly execution_id: string; readonly lease_epoch: number },
): ReportRefusal | null {
  if (execution === null || execution.worker_id !== workerId)
    return {
      code: 'NOT_FOUND',
      message: `no execution ${report.execution_id} on worker ${workerId}`,
      hint: 'The master has no record of it.',
    };
  if (execution.lease_epoch !== report.lease_epoch)
    return {
      code: 'STALE_EPOCH',
      message: `execution ${report.execution_id} has lease_epoch ${execution.lease_epoch}, report says ${report.lease_epoch}`,
      hint: 'Stale report ignored.',
    };
  return null;
}

/** Decides what a report changes; see the module comment. */
export function reactToReport(snapshot: ReportSnapshot, report: ExecutionReport): ReportReaction[] {
  const { records } = snapshot;
  // 1. Fence.
  const refusal = fenceReport(snapshot.worker_id, records?.execution ?? null, report);
  // fenceReport refuses a missing execution, so `records === null` implies a refusal.
  if (refusal !== null || records === null) return [{ kind: 'refuse', ...refusal! }];
  const e = records.execution;
  if (report.task_id !== e.task_id)
    return [
      {
        kind: 'refuse',
        code: 'INVALID_INPUT',
        message: `execution ${e.id} belongs to task ${e.task_id}, but the report names task ${report.task_id}`,
        hint: 'Report refused; nothing changed. A report must name the task of its execution.',
      },
    ];
  // A report about an execution that never ran and never may: the worker rejected it, or the master
  // withdrew its assign and gave the task to another lease (docs/operations.md "Partitions"). Refused, never taken for
  // a disagreement: marking it lost would move the task, which may run elsewhere by now.
  if (e.phase === 'rejected' && report.phase !== 'rejected')
    return [
      {
        kind: 'refuse',
        code: 'STALE_EPOCH',
        message: `execution ${e.id} was rejected or withdrawn; a report of ${report.phase} cannot follow`,
        hint: 'It must not run: the master gave its cards and its task up. End it without starting it.',
      },
    ];
  const reactions: ReportReaction[] = [];
  // 2. Slurm bookkeeping.
  if (report.slurm !== undefined) {
    const binding = report.slurm.binding ?? records.slurm_binding;
    reactions.push({ kind: 'record_slurm', slurm: { ...report.slurm, binding } });
    if (binding !== null && records.slurm_binding === null)
      reactions.push({ kind: 'slurm_bound', job_id: report.slurm.job_id, binding });
  }
  // 3. A late cleanup receipt.
  if (report.phase === 'cleaned' && e.phase === 'cleanup_failed') {
    if (records.lease.state === 'QUARANTINED')
      reactions.push(
        { kind: 'move_lease', event: 'cleaned', reason: 'late cleanup receipt' },
        {
          kind: 'move_execution',
          phase: 'cleaned',
          changes: { detail: report.detail ?? 'late cleanup receipt' },
        },
      );
    return reactions;
  }
  // 4. The execution table.
  const step = executionStep(e.phase, report.phase);
  if (step.kind === 'duplicate') return reactions;
  if (step.kind === 'illegal') {
    const why = `execution ${e.id} is ${e.phase}; a report of ${report.phase} cannot follow (expected ${step.allowed.join(' or ') || 'nothing more'})`;
    reactions.push(
      { kind: 'mark_lost', reason: `illegal execution report: ${why}`, reported: report.phase },
      {
        kind: 'answer',
        code: 'INVALID_STATE',
        message: why,
        hint: 'The master moved the task to RECONCILIATION_REQUIRED; an operator reconciles it (gpu-broker reconcile).',
      },
    );
    return reactions;
  }
  // 5. A legal phase; one that shows a task parked for silence alive first resumes it.
  if (resumesParked(records, report.phase))
    reactions.push({ kind: 'resume', event: 'worker_returned_unstarted', phase: report.phase });
  reactions.push(...movesFor(snapshot, records, report));
  if (report.phase === 'cleaned' || report.phase === 'rejected')
    reactions.push({ kind: 'release_held', cards: records.lease.cards });
  return reactions;
}

/**
 * Whether a legal `accepted` or `started` report resumes a task parked for silence (see `resume`). The
 * master's phase is then `assigned` or `accepted` (a `started` one would make the report a duplicate), so
 * the task goes back to ASSIGNED; a `started` report then moves it on to RUNNING as usual.
 */
function resumesParked(records: ReportRecords, phase: ReportedPhase): boolean {
  return (
    (phase === 'accepted' || phase === 'started') &&
    records.task.state === 'RECONCILIATION_REQUIRED' &&
    records.task.reason === WORKER_UNREACHABLE &&
    records.lease.state === 'QUARANTINED'
  );
}

/** Step 5: the task and lease moves a legal phase makes, then the execution's own move. */
function movesFor(
  snapshot: ReportSnapshot,
  records: ReportRecords,
  report: ExecutionReport,
): ReportReaction[] {
  const { task, lease, execution: e } = records;
  /** The task event where TASK_TABLE takes it; a late report leaves the task alone. */
  const taskMove = (
    event: TaskEvent,
    changes: ReportedTaskChanges = {},
    data: Record<string, unknown> = {},
  ): ReportReaction =>
    taskAccepts(task.state, event)
      ? { kind: 'move_task', event, changes, data }
      : { kind: 'task_unmoved', event, state: task.state };
  /** The lease event where LEASE_TABLE takes it (a lease already past it is left as it is). */
  const leaseMove = (event: LeaseEvent, reason: string | null): ReportReaction[] =>
    leaseAccepts(lease.state, event) ? [{ kind: 'move_lease', event, reason }] : [];
  const phase = report.phase;
  switch (phase) {
    case 'accepted':
      return [{ kind: 'move_execution', phase, changes: {} }];
    case 'started':
      return [
        taskMove('started', { started_at: snapshot.now }),
        { kind: 'move_execution', phase, changes: {} },
      ];
    case 'rejected': {
      const failure = report.failure_reason ?? 'SETUP_FAILED';
      return [
        taskMove('worker_rejected', { failure_reason: failure }, { detail: report.detail }),
        // Nothing ran: the worker refused before any side effect, so the cards are as clean as before.
        ...leaseMove('cleaned', `rejected: ${failure}`),
        {
          kind: 'move_execution',
          phase,
          changes: { failure_reason: failure, detail: report.detail ?? null },
        },
      ];
    }
    case 'exited': {
      const exit = exitedChanges(records, report);
      return [
        taskMove(
          'exited',
          { exit_code: exit.exit_code, signal: exit.signal, failure_reason: exit.failure_reason },
          { failure_reason: exit.failure_reason },
        ),
        ...leaseMove('execution_ended', null),
        { kind: 'move_execution', phase, changes: exit },
      ];
    }
    case 'cleaned': {
      const event = cleanedEvent(task.failure_reason ?? e.failure_reason, task.desired);
      return [
        ...leaseMove('cleaned', 'cleanup receipt'),
        event === 'cleaned_preempted'
          ? taskMove(event, PREEMPTED_REQUEUE, { execution_id: e.id, lease_epoch: e.lease_epoch })
          : taskMove(event),
        { kind: 'move_execution', phase, changes: {} },
      ];
    }
    case 'cleanup_failed': {
      const detail = report.detail ?? 'cleanup not confirmed';
      // A run stopped because its card is gone keeps that reason: its cleanup cannot confirm a card that
      // no longer exists, which is why the lease is quarantined (ADR 0046 §7).
      const failure = task.failure_reason === 'CARD_LOST' ? 'CARD_LOST' : 'CLEANUP_UNCONFIRMED';
      return [
        ...leaseMove('quarantine', detail),
        taskMove('cleanup_failed', { failure_reason: failure }, { detail }),
        { kind: 'move_execution', phase, changes: { detail } },
      ];
    }
  }
}

/**
 * What an `exited` report sets: the exit, the failure it amounts to (OUTPUT_MISSING when a clean exit
 * lacks a required output or reports one the master did not store as reported), the master's own record
 * of each output (its size counted from the bytes it stored, never the report's claim), and the detail.
 */
function exitedChanges(records: ReportRecords, report: ExecutionReport) {
  const outputs = report.outputs ?? [];
  const stored = new Map(records.stored_outputs.map((o) => [o.path, o]));
  const missing = records.task.outputs.filter((o) => o.required && !stored.has(o.path)).map((o) => o.path);
  const mismatched = outputs.filter((o) => stored.get(o.path)?.sha256 !== o.sha256).map((o) => o.path);
  let failure = exitFailureWithPreemption(
    {
      exit_code: report.exit_code ?? null,
      signal: report.signal ?? null,
      failure_reason: report.failure_reason ?? null,
    },
    records.preempting,
    records.task.desired,
  );
  if (!failure && (missing.length > 0 || mismatched.length > 0)) failure = 'OUTPUT_MISSING';
  return {
    exit_code: report.exit_code ?? null,
    signal: report.signal ?? null,
    failure_reason: failure,
    outputs: outputs.flatMap((o) => {
      const kept = stored.get(o.path);
      return kept && kept.sha256 === o.sha256 ? [kept] : [];
    }),
    detail: report.detail ?? (missing.length ? `missing required outputs: ${missing.join(', ')}` : null),
  };
}

/**
 * A preempted task queued again: its last run's exit is cleared (the next run's will be its own), and its
 * reason says why it waits (docs/operations.md "Borrowing and reclaim").
 */
const PREEMPTED_REQUEUE: Readonly<ReportedTaskChanges> = {
  failure_reason: null,
  exit_code: null,
  signal: null,
  started_at: null,
  reason: {
    code: 'preempted',
    message:
      'the scheduler preempted this run to give its cards back to an account asking within its nominal share; the same approved revision is queued again at its old place (no new review), and the next run has GPU_BROKER_PREEMPTED=1',
  },
};
