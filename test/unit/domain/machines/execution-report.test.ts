import { describe, expect, it } from 'vitest';
import type { FailureReason } from '../../../../src/contracts/worker-protocol.js';
import { PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import {
  type ExecutionReport,
  type ReportReaction,
  type ReportRecords,
  type ReportSnapshot,
  reactToReport,
} from '../../../../src/domain/machines/execution-report.js';

/**
 * What an execution report changes (src/domain/machines/execution-report.ts), as a table: the master's records
 * and the report in, the reactions out. The broker's applier (src/broker/workers/reports.ts) is covered
 * by test/unit/broker/* and test/integration/cluster/*.
 */

const SHA_A = 'a'.repeat(64);
const SHA_B = 'b'.repeat(64);

/** An execution `ex1` of task `t1` on worker `w1`, epoch 3, on cards 0 and 1. */
function records(over: {
  phase?: ReportRecords['execution']['phase'];
  failure_reason?: ReportRecords['execution']['failure_reason'];
  task?: Partial<ReportRecords['task']>;
  lease?: ReportRecords['lease']['state'];
  slurm_binding?: ReportRecords['slurm_binding'];
  stored?: ReportRecords['stored_outputs'];
  preempting?: boolean;
}): ReportRecords {
  return {
    execution: {
      id: 'ex1',
      task_id: 't1',
      worker_id: 'w1',
      lease_epoch: 3,
      phase: over.phase ?? 'accepted',
      failure_reason: over.failure_reason ?? null,
    },
    slurm_binding: over.slurm_binding ?? null,
    task: {
      state: 'ASSIGNED',
      desired: 'run',
      failure_reason: null,
      reason: null,
      outputs: [],
      ...over.task,
    },
    lease: { state: over.lease ?? 'ACTIVE', cards: [0, 1] },
    preempting: over.preempting ?? false,
    stored_outputs: over.stored ?? [],
  };
}

function snapshot(r: ReportRecords | null, worker_id = 'w1'): ReportSnapshot {
  return { worker_id, records: r, now: 1_000 };
}

function report(phase: ExecutionReport['phase'], over: Partial<ExecutionReport> = {}): ExecutionReport {
  return {
    type: 'execution',
    protocol_version: PROTOCOL_VERSION,
    boot_id: 'b1',
    seq: 1,
    execution_id: 'ex1',
    task_id: 't1',
    lease_epoch: 3,
    phase,
    ...over,
  };
}

const BINDING: NonNullable<ReportRecords['slurm_binding']> = { nodes: [{ node: 'n1', gpus: [0] }] };

interface Case {
  name: string;
  snapshot: ReportSnapshot;
  report: ExecutionReport;
  want: ReportReaction[];
}

const cases: Case[] = [
  {
    name: 'unknown execution: refused NOT_FOUND',
    snapshot: snapshot(null),
    report: report('started'),
    want: [
      {
        kind: 'refuse',
        code: 'NOT_FOUND',
        message: 'no execution ex1 on worker w1',
        hint: 'The master has no record of it.',
      },
    ],
  },
  {
    name: 'an execution of another worker: refused NOT_FOUND',
    snapshot: snapshot(records({}), 'w2'),
    report: report('started'),
    want: [
      {
        kind: 'refuse',
        code: 'NOT_FOUND',
        message: 'no execution ex1 on worker w2',
        hint: 'The master has no record of it.',
      },
    ],
  },
  {
    name: 'stale epoch: refused STALE_EPOCH, even with a Slurm job',
    snapshot: snapshot(records({})),
    report: report('started', {
      lease_epoch: 2,
      slurm: { job_id: '7', state: 'RUNNING', pending_reason: null, binding: null },
    }),
    want: [
      {
        kind: 'refuse',
        code: 'STALE_EPOCH',
        message: 'execution ex1 has lease_epoch 3, report says 2',
        hint: 'Stale report ignored.',
      },
    ],
  },
  {
    name: 'another task named: refused INVALID_INPUT',
    snapshot: snapshot(records({})),
    report: report('started', { task_id: 't2' }),
    want: [
      {
        kind: 'refuse',
        code: 'INVALID_INPUT',
        message: 'execution ex1 belongs to task t1, but the report names task t2',
        hint: 'Report refused; nothing changed. A report must name the task of its execution.',
      },
    ],
  },
  {
    name: 'accepted after assigned: the execution moves',
    snapshot: snapshot(records({ phase: 'assigned' })),
    report: report('accepted'),
    want: [{ kind: 'move_execution', phase: 'accepted', changes: {} }],
  },
  {
    name: 'a duplicate: nothing',
    snapshot: snapshot(records({ phase: 'started', task: { state: 'RUNNING' } })),
    report: report('accepted'),
    want: [],
  },
  {
    name: 'a repeated accepted with a newer pending reason: only the Slurm job is recorded',
    snapshot: snapshot(records({ phase: 'accepted' })),
    report: report('accepted', {
      slurm: { job_id: '7', state: 'PENDING', pending_reason: 'Resources', binding: null },
    }),
    want: [
      {
        kind: 'record_slurm',
        slurm: { job_id: '7', state: 'PENDING', pending_reason: 'Resources', binding: null },
      },
    ],
  },
  {
    name: 'the first binding is audited; the task starts',
    snapshot: snapshot(records({ phase: 'accepted' })),
    report: report('started', {
      slurm: { job_id: '7', state: 'RUNNING', pending_reason: null, binding: BINDING },
    }),
    want: [
      {
        kind: 'record_slurm',
        slurm: { job_id: '7', state: 'RUNNING', pending_reason: null, binding: BINDING },
      },
      { kind: 'slurm_bound', job_id: '7', binding: BINDING },
      { kind: 'move_task', event: 'started', changes: { started_at: 1_000 }, data: {} },
      { kind: 'move_execution', phase: 'started', changes: {} },
    ],
  },
  {
    name: 'a binding once known is kept (and not audited again)',
    snapshot: snapshot(records({ phase: 'started', task: { state: 'RUNNING' }, slurm_binding: BINDING })),
    report: report('started', {
      slurm: { job_id: '7', state: 'RUNNING', pending_reason: null, binding: null },
    }),
    want: [
      {
        kind: 'record_slurm',
        slurm: { job_id: '7', state: 'RUNNING', pending_reason: null, binding: BINDING },
      },
    ],
  },
  {
    name: 'rejected: the task fails, the lease is released, the cards are given back',
    snapshot: snapshot(records({ phase: 'assigned' })),
    report: report('rejected', { failure_reason: 'STALE_EPOCH', detail: 'pin' }),
    want: [
      {
        kind: 'move_task',
        event: 'worker_rejected',
        changes: { failure_reason: 'STALE_EPOCH' },
        data: { detail: 'pin' },
      },
      { kind: 'move_lease', event: 'cleaned', reason: 'rejected: STALE_EPOCH' },
      {
        kind: 'move_execution',
        phase: 'rejected',
        changes: { failure_reason: 'STALE_EPOCH', detail: 'pin' },
      },
      { kind: 'release_held', cards: [0, 1] },
    ],
  },
  {
    name: 'rejected without a reason: SETUP_FAILED; a released lease is left alone',
    snapshot: snapshot(records({ phase: 'assigned', lease: 'RELEASED' })),
    report: report('rejected'),
    want: [
      {
        kind: 'move_task',
        event: 'worker_rejected',
        changes: { failure_reason: 'SETUP_FAILED' },
        data: { detail: undefined },
      },
      {
        kind: 'move_execution',
        phase: 'rejected',
        changes: { failure_reason: 'SETUP_FAILED', detail: null },
      },
      { kind: 'release_held', cards: [0, 1] },
    ],
  },
  {
    name: 'exited 0 with its required output stored: the lease starts releasing',
    snapshot: snapshot(
      records({
        phase: 'started',
        task: { state: 'RUNNING', outputs: [{ path: 'out/a', required: true }] },
        stored: [{ path: 'out/a', size: 5, sha256: SHA_A }],
      }),
    ),
    report: report('exited', {
      exit_code: 0,
      signal: null,
      outputs: [{ path: 'out/a', size: 99, sha256: SHA_A }],
    }),
    want: [
      {
        kind: 'move_task',
        event: 'exited',
        changes: { exit_code: 0, signal: null, failure_reason: null },
        data: { failure_reason: null },
      },
      { kind: 'move_lease', event: 'execution_ended', reason: null },
      {
        kind: 'move_execution',
        phase: 'exited',
        // The master's record of the output (its own size), never the report's claim.
        changes: {
          exit_code: 0,
          signal: null,
          failure_reason: null,
          outputs: [{ path: 'out/a', size: 5, sha256: SHA_A }],
          detail: null,
        },
      },
    ],
  },
  {
    name: 'exited 0 without a required output: OUTPUT_MISSING',
    snapshot: snapshot(
      records({ phase: 'started', task: { state: 'RUNNING', outputs: [{ path: 'out/a', required: true }] } }),
    ),
    report: report('exited', { exit_code: 0, signal: null }),
    want: [
      {
        kind: 'move_task',
        event: 'exited',
        changes: { exit_code: 0, signal: null, failure_reason: 'OUTPUT_MISSING' },
        data: { failure_reason: 'OUTPUT_MISSING' },
      },
      { kind: 'move_lease', event: 'execution_ended', reason: null },
      {
        kind: 'move_execution',
        phase: 'exited',
        changes: {
          exit_code: 0,
          signal: null,
          failure_reason: 'OUTPUT_MISSING',
          outputs: [],
          detail: 'missing required outputs: out/a',
        },
      },
    ],
  },
  {
    name: 'exited 0 reporting an output the master stored with another sha256: OUTPUT_MISSING',
    snapshot: snapshot(
      records({
        phase: 'started',
        task: { state: 'RUNNING' },
        stored: [{ path: 'out/a', size: 5, sha256: SHA_A }],
      }),
    ),
    report: report('exited', { exit_code: 0, outputs: [{ path: 'out/a', size: 5, sha256: SHA_B }] }),
    want: [
      {
        kind: 'move_task',
        event: 'exited',
        changes: { exit_code: 0, signal: null, failure_reason: 'OUTPUT_MISSING' },
        data: { failure_reason: 'OUTPUT_MISSING' },
      },
      { kind: 'move_lease', event: 'execution_ended', reason: null },
      {
        kind: 'move_execution',
        phase: 'exited',
        changes: { exit_code: 0, signal: null, failure_reason: 'OUTPUT_MISSING', outputs: [], detail: null },
      },
    ],
  },
  {
    name: 'exited on a task already reconciled to a terminal state: the task is left alone',
    snapshot: snapshot(records({ phase: 'started', task: { state: 'CANCELLED' }, lease: 'RELEASED' })),
    report: report('exited', { exit_code: 1 }),
    want: [
      { kind: 'task_unmoved', event: 'exited', state: 'CANCELLED' },
      {
        kind: 'move_execution',
        phase: 'exited',
        changes: { exit_code: 1, signal: null, failure_reason: null, outputs: [], detail: null },
      },
    ],
  },
  {
    name: 'cleaned after a failure: the lease is released, the task fails, the cards are given back',
    snapshot: snapshot(
      records({
        phase: 'exited',
        failure_reason: 'EXIT_NONZERO',
        task: { state: 'FINALIZING' },
        lease: 'RELEASING',
      }),
    ),
    report: report('cleaned'),
    want: [
      { kind: 'move_lease', event: 'cleaned', reason: 'cleanup receipt' },
      { kind: 'move_task', event: 'cleaned_failure', changes: {}, data: {} },
      { kind: 'move_execution', phase: 'cleaned', changes: {} },
      { kind: 'release_held', cards: [0, 1] },
    ],
  },
  {
    name: 'cleaned with a cancel desired and a failure on the task: cancelled',
    snapshot: snapshot(
      records({
        phase: 'exited',
        task: { state: 'FINALIZING', desired: 'cancel', failure_reason: 'TIMED_OUT' },
        lease: 'RELEASING',
      }),
    ),
    report: report('cleaned'),
    want: [
      { kind: 'move_lease', event: 'cleaned', reason: 'cleanup receipt' },
      { kind: 'move_task', event: 'cleaned_cancelled', changes: {}, data: {} },
      { kind: 'move_execution', phase: 'cleaned', changes: {} },
      { kind: 'release_held', cards: [0, 1] },
    ],
  },
  ...preemptionCases(),
  {
    name: 'cleanup_failed: the lease is quarantined and the task fails CLEANUP_UNCONFIRMED',
    snapshot: snapshot(records({ phase: 'exited', task: { state: 'FINALIZING' }, lease: 'RELEASING' })),
    report: report('cleanup_failed'),
    want: [
      { kind: 'move_lease', event: 'quarantine', reason: 'cleanup not confirmed' },
      {
        kind: 'move_task',
        event: 'cleanup_failed',
        changes: { failure_reason: 'CLEANUP_UNCONFIRMED' },
        data: { detail: 'cleanup not confirmed' },
      },
      { kind: 'move_execution', phase: 'cleanup_failed', changes: { detail: 'cleanup not confirmed' } },
    ],
  },
  {
    // ADR 0046 §7: the worker stopped the run because a leased card left its samples; a task that traps
    // SIGTERM and exits 0 does not turn that into a success.
    name: 'exited CARD_LOST with exit 0 after SIGTERM: the task fails CARD_LOST',
    snapshot: snapshot(records({ phase: 'started', task: { state: 'RUNNING' } })),
    report: report('exited', {
      exit_code: 0,
      signal: null,
      failure_reason: 'CARD_LOST',
      detail: 'leased card gone: 0:mig:1/0 (MIG-a) is no longer on this worker; the run ended CANCELLED',
    }),
    want: [
      {
        kind: 'move_task',
        event: 'exited',
        changes: { exit_code: 0, signal: null, failure_reason: 'CARD_LOST' },
        data: { failure_reason: 'CARD_LOST' },
      },
      { kind: 'move_lease', event: 'execution_ended', reason: null },
      {
        kind: 'move_execution',
        phase: 'exited',
        changes: {
          exit_code: 0,
          signal: null,
          failure_reason: 'CARD_LOST',
          outputs: [],
          detail: 'leased card gone: 0:mig:1/0 (MIG-a) is no longer on this worker; the run ended CANCELLED',
        },
      },
    ],
  },
  {
    name: 'cleanup_failed after CARD_LOST: the lease is quarantined, the task keeps CARD_LOST',
    snapshot: snapshot(
      records({
        phase: 'exited',
        task: { state: 'FINALIZING', failure_reason: 'CARD_LOST' },
        lease: 'RELEASING',
      }),
    ),
    report: report('cleanup_failed', { detail: 'card 0 (GPU-0) is missing from the sample' }),
    want: [
      { kind: 'move_lease', event: 'quarantine', reason: 'card 0 (GPU-0) is missing from the sample' },
      {
        kind: 'move_task',
        event: 'cleanup_failed',
        changes: { failure_reason: 'CARD_LOST' },
        data: { detail: 'card 0 (GPU-0) is missing from the sample' },
      },
      {
        kind: 'move_execution',
        phase: 'cleanup_failed',
        changes: { detail: 'card 0 (GPU-0) is missing from the sample' },
      },
    ],
  },
  {
    name: 'a late cleanup receipt releases the quarantined lease; the task keeps its state',
    snapshot: snapshot(records({ phase: 'cleanup_failed', task: { state: 'FAILED' }, lease: 'QUARANTINED' })),
    report: report('cleaned'),
    want: [
      { kind: 'move_lease', event: 'cleaned', reason: 'late cleanup receipt' },
      { kind: 'move_execution', phase: 'cleaned', changes: { detail: 'late cleanup receipt' } },
    ],
  },
  {
    name: 'a late cleanup receipt after an operator released the lease: nothing',
    snapshot: snapshot(records({ phase: 'cleanup_failed', task: { state: 'FAILED' }, lease: 'RELEASED' })),
    report: report('cleaned'),
    want: [],
  },
  {
    name: 'an illegal jump: the execution is lost and the worker answered INVALID_STATE',
    snapshot: snapshot(records({ phase: 'assigned' })),
    report: report('exited', { exit_code: 0 }),
    want: [
      {
        kind: 'mark_lost',
        reason:
          'illegal execution report: execution ex1 is assigned; a report of exited cannot follow (expected accepted or rejected)',
        reported: 'exited',
      },
      {
        kind: 'answer',
        code: 'INVALID_STATE',
        message:
          'execution ex1 is assigned; a report of exited cannot follow (expected accepted or rejected)',
        hint: 'The master moved the task to RECONCILIATION_REQUIRED; an operator reconciles it (gpu-broker reconcile).',
      },
    ],
  },
  {
    name: 'anything after rejected (or withdrawn) is refused STALE_EPOCH, never taken for lost: the task may run elsewhere',
    snapshot: snapshot(records({ phase: 'rejected', task: { state: 'RUNNING' }, lease: 'RELEASED' })),
    report: report('started'),
    want: [
      {
        kind: 'refuse',
        code: 'STALE_EPOCH',
        message: 'execution ex1 was rejected or withdrawn; a report of started cannot follow',
        hint: 'It must not run: the master gave its cards and its task up. End it without starting it.',
      },
    ],
  },
  {
    name: 'accepted after a withdrawal: refused, so the worker never starts it',
    snapshot: snapshot(records({ phase: 'rejected', task: { state: 'QUEUED' }, lease: 'RELEASED' })),
    report: report('accepted'),
    want: [
      {
        kind: 'refuse',
        code: 'STALE_EPOCH',
        message: 'execution ex1 was rejected or withdrawn; a report of accepted cannot follow',
        hint: 'It must not run: the master gave its cards and its task up. End it without starting it.',
      },
    ],
  },
  {
    name: 'accepted for a task parked for silence: resumed (ASSIGNED, lease ACTIVE) before the execution moves',
    snapshot: snapshot(
      records({
        phase: 'assigned',
        task: { state: 'RECONCILIATION_REQUIRED', reason: 'worker_unreachable' },
        lease: 'QUARANTINED',
      }),
    ),
    report: report('accepted'),
    want: [
      { kind: 'resume', event: 'worker_returned_unstarted', phase: 'accepted' },
      { kind: 'move_execution', phase: 'accepted', changes: {} },
    ],
  },
  {
    name: 'started for a task parked for silence: resumed, then started as usual',
    snapshot: snapshot(
      records({
        phase: 'accepted',
        task: { state: 'RECONCILIATION_REQUIRED', reason: 'worker_unreachable' },
        lease: 'QUARANTINED',
      }),
    ),
    report: report('started'),
    want: [
      { kind: 'resume', event: 'worker_returned_unstarted', phase: 'started' },
      { kind: 'move_task', event: 'started', changes: { started_at: 1_000 }, data: {} },
      { kind: 'move_execution', phase: 'started', changes: {} },
    ],
  },
  {
    name: 'started for a task parked for another cause: not resumed (the task moves, the lease stays)',
    snapshot: snapshot(
      records({
        phase: 'accepted',
        task: { state: 'RECONCILIATION_REQUIRED', reason: null },
        lease: 'QUARANTINED',
      }),
    ),
    report: report('started'),
    want: [
      { kind: 'move_task', event: 'started', changes: { started_at: 1_000 }, data: {} },
      { kind: 'move_execution', phase: 'started', changes: {} },
    ],
  },
];

/** The exits and receipts of a run the scheduler asked to preempt, or that claims it was. */
function preemptionCases(): Case[] {
  const exited = (
    name: string,
    over: { preempting: boolean; desired?: 'run' | 'cancel' },
    r: Partial<ExecutionReport>,
    failure: FailureReason | null,
  ): Case => ({
    name,
    snapshot: snapshot(
      records({
        phase: 'started',
        preempting: over.preempting,
        task: {
          state: 'RUNNING',
          desired: over.desired ?? 'run',
          outputs: [{ path: 'out/a', required: true }],
        },
      }),
    ),
    report: report('exited', { outputs: [], ...r }),
    want: [
      {
        kind: 'move_task',
        event: 'exited',
        changes: { exit_code: r.exit_code ?? null, signal: r.signal ?? null, failure_reason: failure },
        data: { failure_reason: failure },
      },
      { kind: 'move_lease', event: 'execution_ended', reason: null },
      {
        kind: 'move_execution',
        phase: 'exited',
        changes: {
          exit_code: r.exit_code ?? null,
          signal: r.signal ?? null,
          failure_reason: failure,
          outputs: [],
          // The detail names a missing required output whatever the failure.
          detail: 'missing required outputs: out/a',
        },
      },
    ],
  });
  return [
    exited(
      'exited PREEMPTED after a preemption was asked: PREEMPTED even at exit 0 (it checkpointed), no output check',
      { preempting: true },
      { exit_code: 0, signal: null, failure_reason: 'PREEMPTED' },
      'PREEMPTED',
    ),
    exited(
      'exited PREEMPTED though no preemption was asked: judged by the exit (a task cannot requeue itself)',
      { preempting: false },
      { exit_code: null, signal: 'SIGTERM', failure_reason: 'PREEMPTED' },
      'KILLED_BY_SIGNAL',
    ),
    exited(
      'exited PREEMPTED at exit 0 though no preemption was asked: a clean exit, outputs checked',
      { preempting: false },
      { exit_code: 0, signal: null, failure_reason: 'PREEMPTED' },
      'OUTPUT_MISSING',
    ),
    exited(
      "an older worker's CANCELLED for a preempted lease: PREEMPTED",
      { preempting: true },
      { exit_code: null, signal: 'SIGTERM', failure_reason: 'CANCELLED' },
      'PREEMPTED',
    ),
    exited(
      'WORKER_LOST while a preemption was asked (the worker restarted mid-grace): PREEMPTED, queued again',
      { preempting: true },
      { exit_code: null, signal: null, failure_reason: 'WORKER_LOST' },
      'PREEMPTED',
    ),
    exited(
      'WORKER_LOST with no preemption asked: WORKER_LOST, as ever',
      { preempting: false },
      { exit_code: null, signal: null, failure_reason: 'WORKER_LOST' },
      'WORKER_LOST',
    ),
    exited(
      'WORKER_LOST while preempting but the owner cancelled: WORKER_LOST (nothing to requeue)',
      { preempting: true, desired: 'cancel' },
      { exit_code: null, signal: null, failure_reason: 'WORKER_LOST' },
      'WORKER_LOST',
    ),
    exited(
      'CANCELLED for a preempted lease whose owner also cancelled: CANCELLED (a cancel wins)',
      { preempting: true, desired: 'cancel' },
      { exit_code: null, signal: 'SIGTERM', failure_reason: 'CANCELLED' },
      'CANCELLED',
    ),
    {
      name: 'cleaned after a preemption: the lease is released, the task queued again with its exit cleared',
      snapshot: snapshot(
        records({
          phase: 'exited',
          failure_reason: 'PREEMPTED',
          preempting: true,
          task: { state: 'FINALIZING', failure_reason: 'PREEMPTED' },
          lease: 'RELEASING',
        }),
      ),
      report: report('cleaned'),
      want: [
        { kind: 'move_lease', event: 'cleaned', reason: 'cleanup receipt' },
        {
          kind: 'move_task',
          event: 'cleaned_preempted',
          changes: {
            failure_reason: null,
            exit_code: null,
            signal: null,
            started_at: null,
            reason: { code: 'preempted', message: expect.stringContaining('no new review') },
          },
          data: { execution_id: 'ex1', lease_epoch: 3 },
        },
        { kind: 'move_execution', phase: 'cleaned', changes: {} },
        { kind: 'release_held', cards: [0, 1] },
      ],
    },
    {
      name: 'cleaned after a preemption the owner cancelled too: cancelled, not queued',
      snapshot: snapshot(
        records({
          phase: 'exited',
          failure_reason: 'PREEMPTED',
          preempting: true,
          task: { state: 'FINALIZING', desired: 'cancel', failure_reason: 'PREEMPTED' },
          lease: 'RELEASING',
        }),
      ),
      report: report('cleaned'),
      want: [
        { kind: 'move_lease', event: 'cleaned', reason: 'cleanup receipt' },
        { kind: 'move_task', event: 'cleaned_cancelled', changes: {}, data: {} },
        { kind: 'move_execution', phase: 'cleaned', changes: {} },
        { kind: 'release_held', cards: [0, 1] },
      ],
    },
  ];
}

describe('reactToReport', () => {
  it.each(cases)('$name', ({ snapshot: s, report: r, want }) => {
    expect(reactToReport(s, r)).toEqual(want);
  });

  it('a refusal is the only reaction', () => {
    for (const c of cases) {
      const got = reactToReport(c.snapshot, c.report);
      if (got.some((x) => x.kind === 'refuse')) expect(got).toHaveLength(1);
    }
  });
});
