import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ExecutionPhase } from '../../../src/domain/execution.js';
import { type HelloSnapshot, reconcileHello } from '../../../src/domain/worker-reconcile.js';

/** The hello reconcile (src/domain/worker-reconcile.ts): decisions as data, checked as properties. */

const REPORTED = ['accepted', 'rejected', 'started', 'exited', 'cleaned', 'cleanup_failed'] as const;
const UNFINISHED: ExecutionPhase[] = ['assigned', 'accepted', 'started', 'exited'];

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
      .map(({ id, i }) => ({ execution_id: `ex${id}`, phase: g.phases[i]!, cards: g.cards[i]! })),
    unfinished: g.ids
      .map((id, i) => ({ id, i }))
      .filter(({ i }) => g.masterMask[i])
      .map(({ id, i }) => ({
        execution_id: `ex${id}`,
        phase: g.masterPhases[i]!,
        pending_assign: g.pending[i] ?? null,
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
        { execution_id: 'ex_on_its_way', phase: 'assigned', pending_assign: { boot_id: 'm1', seq: 8 } },
        { execution_id: 'ex_processed', phase: 'assigned', pending_assign: { boot_id: 'm1', seq: 7 } },
        { execution_id: 'ex_forgotten', phase: 'started', pending_assign: null },
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
});
