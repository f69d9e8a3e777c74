import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ExecutionPhase } from '../../../../src/domain/machines/execution.js';
import type { LeaseState } from '../../../../src/domain/machines/lease.js';
import {
  isSettledTask,
  TASK_STATES,
  type TaskState,
  WORKER_UNREACHABLE,
  waitSettles,
} from '../../../../src/domain/machines/task.js';
import { type HelloSnapshot, reconcileHello } from '../../../../src/domain/machines/worker-reconcile.js';

/** The hello reconcile (src/domain/machines/worker-reconcile.ts): decisions as data, checked as properties. */

const REPORTED = ['accepted', 'rejected', 'started', 'exited', 'cleaned', 'cleanup_failed'] as const;
const UNFINISHED: ExecutionPhase[] = ['assigned', 'accepted', 'started', 'exited'];
const TASK_STATES_HELD: TaskState[] = ['ASSIGNED', 'RUNNING', 'FINALIZING', 'RECONCILIATION_REQUIRED'];
const LEASE_STATES_HELD: LeaseState[] = ['ACTIVE', 'RELEASING', 'QUARANTINED'];

/** An unfinished execution the master parked for silence: RECONCILIATION_REQUIRED, lease QUARANTINED. */
function parked(
  execution_id: string,
  phase: ExecutionPhase,
  over: Partial<HelloSnapshot['unfinished'][number]> = {},
): HelloSnapshot['unfinished'][number] {
  return {
    execution_id,
    phase,
    pending_assign: null,
    lease_epoch: 5,
    task_state: 'RECONCILIATION_REQUIRED',
    task_reason: WORKER_UNREACHABLE,
    lease_state: 'QUARANTINED',
    cards: [0, 1],
    ...over,
  };
}

/** A hello listing `reported` (complete), with `unfinished` on the master and `card_epochs`. */
function hello(
  reported: HelloSnapshot['reported'],
  unfinished: HelloSnapshot['unfinished'],
  card_epochs: HelloSnapshot['card_epochs'] = [],
): HelloSnapshot {
  return { reported, listed_all: true, unfinished, master_marks: [], card_epochs };
}

const snapshotArb: fc.Arbitrary<HelloSnapshot> = fc
  .record({
    ids: fc.uniqueArray(fc.integer({ min: 0, max: 30 }), { maxLength: 12 }),
    reportedMask: fc.array(fc.boolean(), { minLength: 12, maxLength: 12 }),
    masterMask: fc.array(fc.boolean(), { minLength: 12, maxLength: 12 }),
    phases: fc.array(fc.constantFrom(...REPORTED), { minLength: 12, maxLength: 12 }),
    masterPhases: fc.array(fc.constantFrom(...UNFINISHED), { minLength: 12, maxLength: 12 }),
    pending: fc.array(
      fc.option(fc.record({ boot_id: fc.constantFrom('m1', 'm2'), seq: fc.integer({ min: 1, max: 50 }) })),
      { minLength: 12, maxLength: 12 },
    ),
    cards: fc.array(fc.uniqueArray(fc.integer({ min: 0, max: 7 }), { minLength: 1, maxLength: 3 }), {
      minLength: 12,
      maxLength: 12,
    }),
    epochs: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 12, maxLength: 12 }),
    listedEpochs: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 12, maxLength: 12 }),
    taskStates: fc.array(fc.constantFrom(...TASK_STATES_HELD), { minLength: 12, maxLength: 12 }),
    taskReasons: fc.array(fc.constantFrom(WORKER_UNREACHABLE, 'illegal_report', null), {
      minLength: 12,
      maxLength: 12,
    }),
    leaseStates: fc.array(fc.constantFrom(...LEASE_STATES_HELD), { minLength: 12, maxLength: 12 }),
    listed_all: fc.boolean(),
    master_marks: fc.array(fc.record({ boot_id: fc.constantFrom('m1', 'm2'), seq: fc.nat({ max: 50 }) }), {
      maxLength: 3,
    }),
    card_epochs: fc.array(fc.record({ index: fc.nat({ max: 7 }), epoch: fc.nat({ max: 99 }) }), {
      maxLength: 8,
    }),
  })
  .map((g) => ({
    reported: g.ids
      .map((id, i) => ({ id, i }))
      .filter(({ i }) => g.reportedMask[i])
      .map(({ id, i }) => ({
        execution_id: `ex${id}`,
        lease_epoch: g.listedEpochs[i]!,
        phase: g.phases[i]!,
        cards: g.cards[i]!,
      })),
    unfinished: g.ids
      .map((id, i) => ({ id, i }))
      .filter(({ i }) => g.masterMask[i])
      .map(({ id, i }) => ({
        execution_id: `ex${id}`,
        phase: g.masterPhases[i]!,
        pending_assign: g.pending[i] ?? null,
        lease_epoch: g.epochs[i]!,
        task_state: g.taskStates[i]!,
        task_reason: g.taskReasons[i]!,
        lease_state: g.leaseStates[i]!,
        cards: g.cards[i]!,
      })),
    listed_all: g.listed_all,
    master_marks: g.master_marks,
    card_epochs: g.card_epochs,
  }));

describe('reconcileHello', () => {
  it('never marks lost or queries an execution the worker listed', () => {
    fc.assert(
      fc.property(snapshotArb, (snap) => {
        const listed = new Set(snap.reported.map((e) => e.execution_id));
        for (const a of reconcileHello(snap))
          if (a.kind === 'mark_lost' || a.kind === 'query') expect(listed.has(a.execution_id)).toBe(false);
      }),
    );
  });

  it('decides every unlisted unfinished execution exactly once: lost (complete list) or query (cut list)', () => {
    fc.assert(
      fc.property(snapshotArb, (snap) => {
        const listed = new Set(snap.reported.map((e) => e.execution_id));
        const decided = reconcileHello(snap).filter((a) => a.kind === 'mark_lost' || a.kind === 'query');
        const processed = (a: { boot_id: string; seq: number }) =>
          snap.master_marks.some((m) => m.boot_id === a.boot_id && m.seq >= a.seq);
        const onItsWay = (e: HelloSnapshot['unfinished'][number]) =>
          e.phase === 'assigned' && e.pending_assign !== null && !processed(e.pending_assign);
        const expected = snap.unfinished.filter((e) => !listed.has(e.execution_id) && !onItsWay(e));
        expect(decided.map((a) => a.execution_id).sort()).toEqual(expected.map((e) => e.execution_id).sort());
        for (const a of decided) expect(a.kind).toBe(snap.listed_all ? 'mark_lost' : 'query');
      }),
    );
  });

  it('holds exactly the cards of what the worker still runs, once, last', () => {
    fc.assert(
      fc.property(snapshotArb, (snap) => {
        const actions = reconcileHello(snap);
        const holds = actions.filter((a) => a.kind === 'hold_cards');
        expect(holds).toHaveLength(1);
        expect(actions.at(-1)).toBe(holds[0]);
        const expected = new Set(
          snap.reported
            .filter((e) => !['rejected', 'cleaned', 'cleanup_failed'].includes(e.phase))
            .flatMap((e) => e.cards),
        );
        const held = holds[0]?.kind === 'hold_cards' ? holds[0].cards : [];
        expect([...held]).toEqual([...expected].sort((a, b) => a - b));
      }),
    );
  });

  it('passes on every mark and epoch the worker reported', () => {
    fc.assert(
      fc.property(snapshotArb, (snap) => {
        const actions = reconcileHello(snap);
        expect(actions.filter((a) => a.kind === 'ack_outbox_through')).toHaveLength(snap.master_marks.length);
        expect(
          actions.flatMap((a) => (a.kind === 'raise_epoch' ? [{ index: a.index, epoch: a.epoch }] : [])),
        ).toEqual(snap.card_epochs);
      }),
    );
  });

  it('leaves alone an assign that is still on its way, not one the same hello says was processed', () => {
    const actions = reconcileHello({
      reported: [],
      listed_all: true,
      unfinished: [
        parked('ex_on_its_way', 'assigned', { pending_assign: { boot_id: 'm1', seq: 8 } }),
        parked('ex_processed', 'assigned', { pending_assign: { boot_id: 'm1', seq: 7 } }),
        parked('ex_forgotten', 'started'),
      ],
      master_marks: [{ boot_id: 'm1', seq: 7 }],
      card_epochs: [],
    });
    expect(actions).toEqual([
      { kind: 'ack_outbox_through', boot_id: 'm1', seq: 7 },
      {
        kind: 'mark_lost',
        execution_id: 'ex_processed',
        reason: 'execution ex_processed is not known to the worker',
      },
      {
        kind: 'mark_lost',
        execution_id: 'ex_forgotten',
        reason: 'execution ex_forgotten is not known to the worker',
      },
      { kind: 'hold_cards', cards: [] },
    ]);
  });

  it('resumes exactly the listed executions parked for silence that the worker vouches for', () => {
    fc.assert(
      fc.property(snapshotArb, (snap) => {
        const listed = new Map(snap.reported.map((e) => [e.execution_id, e]));
        const expected = snap.unfinished.flatMap((e) => {
          const l = listed.get(e.execution_id);
          if (!l || e.task_state !== 'RECONCILIATION_REQUIRED' || e.task_reason !== WORKER_UNREACHABLE)
            return [];
          if (e.lease_state !== 'QUARANTINED' || l.lease_epoch !== e.lease_epoch) return [];
          if (l.phase !== 'accepted' && l.phase !== 'started') return [];
          if (e.phase === 'exited' || (e.phase === 'started' && l.phase === 'accepted')) return [];
          if (snap.card_epochs.some((c) => e.cards.includes(c.index) && c.epoch > e.lease_epoch)) return [];
          return [
            {
              kind: 'resume',
              execution_id: e.execution_id,
              event: e.phase === 'started' ? 'worker_returned' : 'worker_returned_unstarted',
              phase: l.phase,
            },
          ];
        });
        expect(reconcileHello(snap).filter((a) => a.kind === 'resume')).toEqual(expected);
      }),
    );
  });

  it('a worker back with a started execution resumes it RUNNING; an accepted one ASSIGNED', () => {
    const actions = reconcileHello(
      hello(
        [
          { execution_id: 'ex_run', lease_epoch: 5, phase: 'started', cards: [0] },
          { execution_id: 'ex_acc', lease_epoch: 6, phase: 'started', cards: [1] },
        ],
        [
          parked('ex_run', 'started', { cards: [0] }),
          parked('ex_acc', 'accepted', { lease_epoch: 6, cards: [1] }),
        ],
        [
          { index: 0, epoch: 5 },
          { index: 1, epoch: 6 },
        ],
      ),
    );
    expect(actions.filter((a) => a.kind === 'resume')).toEqual([
      { kind: 'resume', execution_id: 'ex_run', event: 'worker_returned', phase: 'started' },
      { kind: 'resume', execution_id: 'ex_acc', event: 'worker_returned_unstarted', phase: 'started' },
    ]);
  });

  it.each([
    ['another epoch', parked('ex', 'started', { lease_epoch: 4 }), [] as HelloSnapshot['card_epochs']],
    ['a later epoch seen on one of its cards', parked('ex', 'started'), [{ index: 1, epoch: 6 }]],
    ['a task parked for an illegal report', parked('ex', 'started', { task_reason: 'illegal_report' }), []],
    ['a task already reconciled', parked('ex', 'started', { task_state: 'FAILED' }), []],
    ['a lease not quarantined', parked('ex', 'started', { lease_state: 'RELEASING' }), []],
    ['an execution that exited on the master', parked('ex', 'exited'), []],
  ])('never resumes %s', (_what, unfinished, epochs) => {
    const actions = reconcileHello(
      hello([{ execution_id: 'ex', lease_epoch: 5, phase: 'started', cards: [0, 1] }], [unfinished], epochs),
    );
    expect(actions.filter((a) => a.kind === 'resume')).toEqual([]);
  });

  it('never resumes an execution the worker lists as ended or not yet started past the master', () => {
    for (const phase of ['exited', 'cleaned', 'cleanup_failed', 'rejected'] as const)
      expect(
        reconcileHello(
          hello([{ execution_id: 'ex', lease_epoch: 5, phase, cards: [0] }], [parked('ex', 'started')]),
        ),
      ).not.toContainEqual(expect.objectContaining({ kind: 'resume' }));
    expect(
      reconcileHello(
        hello(
          [{ execution_id: 'ex', lease_epoch: 5, phase: 'accepted', cards: [0] }],
          [parked('ex', 'started')],
        ),
      ),
    ).not.toContainEqual(expect.objectContaining({ kind: 'resume' }));
  });
});

describe('waitSettles (wait_for_task)', () => {
  it('keeps waiting on a task parked for silence, ends on every other settled state', () => {
    expect(waitSettles('RECONCILIATION_REQUIRED', WORKER_UNREACHABLE)).toBe(false);
    expect(waitSettles('RECONCILIATION_REQUIRED', null)).toBe(true);
    expect(waitSettles('RECONCILIATION_REQUIRED', 'illegal_report')).toBe(true);
    for (const s of TASK_STATES)
      if (s !== 'RECONCILIATION_REQUIRED') expect(waitSettles(s, WORKER_UNREACHABLE)).toBe(isSettledTask(s));
  });
});
