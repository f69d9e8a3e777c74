import { describe, expect, it } from 'vitest';
import { type CardMig, migCardIndex } from '../../../../src/contracts/sample.js';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingSnapshot,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';
import { SCHEDULING_CONFIG, simWorkerView } from '../../../support/scheduling-views.js';

/**
 * A hostile review of backfill into reservations (ADR 0049): a reservation whose start is not bounded
 * by the hard stops of the leases it waits for must promise nothing, and backfill never takes a card
 * plain placement could not (cordoned, a qualification run's, another shape's slice, past host room).
 */

const NOW = 1_000;
const MIN = 60_000;
const AGED = NOW - 20 * MIN;
const FRESH = NOW - MIN;

/** `id`: cards 0-3 leased, ending by `endsBy`; 4-7 free. */
function halfBusy(id: string, endsBy: number): WorkerView {
  const w = simWorkerView(id, [0, 1, 2, 3]);
  return { ...w, cards: w.cards.map((c) => (c.leased ? { ...c, lease_ends_by: endsBy } : c)) };
}

function task(id: string, count: number, approvedAt: number, limitSeconds?: number): QueuedTaskView {
  return {
    task_id: id,
    owner: 'alice',
    priority: 0,
    approved_at: approvedAt,
    cards: { count },
    ...(limitSeconds === undefined ? {} : { time_limit_seconds: limitSeconds }),
  };
}

function snapshot(
  workers: WorkerView[],
  tasks: QueuedTaskView[],
  extra: Partial<SchedulingSnapshot> = {},
): SchedulingSnapshot {
  return { workers, tasks, running_cards_by_owner: {}, config: SCHEDULING_CONFIG, ...extra };
}

describe('backfill attacks (ADR 0049)', () => {
  it('a claimant’s reservation is not backfilled: its victims are being stopped now, not at their hard stops', () => {
    // 'claim' is the task cards are being reclaimed for (fresh, not aged): the victims' leases on 0-3
    // end by their limits in 10 h, but they are stopping now. A 1-hour task (a requeued victim, say)
    // taking card 4 would hold what reclaim freed for the claimant for an hour.
    const d = decide(
      snapshot([halfBusy('w0', NOW + 600 * MIN)], [task('claim', 8, FRESH), task('victim', 1, FRESH, 3600)], {
        reclaiming: ['claim'],
      }),
      NOW,
    );
    expect(d.grants).toEqual([]);
    expect(d.reservations).toEqual([{ task_id: 'claim', worker_id: 'w0', card_indexes: [4, 5, 6, 7] }]);
  });

  it('an aged claimant’s reservation is not backfilled either', () => {
    const d = decide(
      snapshot([halfBusy('w0', NOW + 600 * MIN)], [task('claim', 8, AGED), task('s', 1, FRESH, 60)], {
        reclaiming: ['claim'],
      }),
      NOW,
    );
    expect(d.grants).toEqual([]);
  });

  it('never on a Slurm pool, even one whose cards do not name their nodes', () => {
    const pool: WorkerView = { ...halfBusy('slurm', NOW + 30 * MIN), backend: 'slurm' };
    const d = decide(snapshot([pool], [task('big', 8, AGED), task('s', 1, FRESH, 60)]), NOW);
    expect(d.grants).toEqual([]);
    expect(d.reservations.map((r) => r.task_id)).toEqual(['big']);
  });

  it('a cordoned free card is neither held nor backfilled', () => {
    const w = halfBusy('w0', NOW + 30 * MIN);
    const worker = { ...w, cards: w.cards.map((c) => (c.index === 7 ? { ...c, cordoned: true } : c)) };
    // 4 leased + 3 free = 7 < 8 on w0: no reservation there, so nothing to backfill into.
    const d = decide(snapshot([worker], [task('big', 8, AGED), task('s', 4, FRESH, 60)]), NOW);
    expect(d.grants).toEqual([]);
  });

  it('a cordoned leased card does not count toward the shadow (its end says nothing)', () => {
    // 7-card aged task: 4 free held, waits for 3 of the leased; card 0's lease ends soon but it is
    // cordoned, so the shadow is the 3rd earliest of cards 1-3 (30 min), not of 0-2.
    const w = halfBusy('w0', NOW + 30 * MIN);
    const worker = {
      ...w,
      cards: w.cards.map((c) => (c.index === 0 ? { ...c, cordoned: true, lease_ends_by: NOW + MIN } : c)),
    };
    const d = decide(snapshot([worker], [task('big', 7, AGED), task('s', 1, FRESH, 20 * 60)]), NOW);
    expect(d.grants.map((g) => g.task_id)).toEqual(['s']);
  });

  it('a lease stuck past its limit (its end in the past) lets nothing backfill before it', () => {
    // RELEASING past its limit: the end is in the past, so no task can end by it.
    const d = decide(
      snapshot([halfBusy('w0', NOW - 5 * MIN)], [task('big', 8, AGED), task('s', 1, FRESH, 1)]),
      NOW,
    );
    expect(d.grants).toEqual([]);
  });

  it('a huge limit never backfills; a limit of 1 s does within the margin', () => {
    const huge = decide(
      snapshot([halfBusy('w0', NOW + 30 * MIN)], [task('big', 8, AGED), task('s', 1, FRESH, 1e12)]),
      NOW,
    );
    expect(huge.grants).toEqual([]);
    const one = decide(
      snapshot([halfBusy('w0', NOW + 30 * MIN)], [task('big', 8, AGED), task('s', 1, FRESH, 1)]),
      NOW,
    );
    expect(one.grants.map((g) => g.task_id)).toEqual(['s']);
  });

  it('a qualification run’s free card is never backfilled by a task outside the run', () => {
    const w = halfBusy('w0', NOW + 30 * MIN);
    const worker = {
      ...w,
      cards: w.cards.map((c) => (c.index === 4 ? { ...c, reserved_for_run: 'q1' } : c)),
    };
    // 'big' holds 5-7 (card 4 is the run's); a 4-card task may take neither card 4 nor more than 3.
    const d = decide(snapshot([worker], [task('big', 7, AGED), task('s', 4, FRESH, 60)]), NOW);
    expect(d.grants).toEqual([]);
  });

  it('after a backfill the aged task’s reason says what it still holds, as its reservation does', () => {
    const d = decide(
      snapshot([halfBusy('w0', NOW + 30 * MIN)], [task('big', 8, AGED), task('s', 1, FRESH, 60)]),
      NOW,
    );
    expect(d.grants.map((g) => g.task_id)).toEqual(['s']);
    expect(d.reservations[0]!.card_indexes).toEqual([5, 6, 7]);
    const reason = d.waiting.find((w) => w.task_id === 'big')!.reason;
    expect(reason).toMatchObject({ code: 'holding_reservation', held: 3, need: 8 });
    expect(reason.message).toContain('holds 3 of the 8 cards');
  });

  it('a backfill must fit its host’s CPUs left like any placement', () => {
    // 16 CPUs less the reserve; 14 promised to the running tasks: a task asking 4 CPUs fits no card here.
    const w = {
      ...halfBusy('w0', NOW + 30 * MIN),
      host: { memory_mib: 1_048_576, cpus: 16, disk_mib: 10_485_760 },
    };
    const tasks = [task('big', 8, AGED), { ...task('s', 1, FRESH, 60), limits: { cpus: 4 } }];
    expect(decide(snapshot([{ ...w, cpus_committed: 14 }], tasks), NOW).grants).toEqual([]);
    expect(decide(snapshot([{ ...w, cpus_committed: 2 }], tasks), NOW).grants.map((g) => g.task_id)).toEqual([
      's',
    ]);
  });

  it('MIG: a slice held for an aged slice task is backfilled only by a task that takes slices', () => {
    // w0: card 0 whole and free; card 1 in MIG mode with two 3g.40gb slices, the first leased until
    // 30 min from now. 'big' (aged) needs both slices: it holds the free one.
    const base = simWorkerView('w0', [], 2);
    const sliceOf = (gi: number, leased: boolean): CardView => {
      const mig: CardMig = {
        parent_index: 1,
        parent_uuid: 'GPU-1',
        profile: '3g.40gb',
        gpu_instance_profile: '3g.40gb',
        gpu_instance: gi,
        compute_instance: 0,
        compute_slices: 3,
        gi_access_minor: 3 + 9 * gi,
        ci_access_minor: 4 + 9 * gi,
        memory_source: 'instance',
      };
      return {
        ...base.cards[1]!,
        index: migCardIndex(1, gi, 0),
        memory_total_mib: 40448,
        mig,
        leased,
        ...(leased ? { lease_ends_by: NOW + 30 * MIN } : {}),
      };
    };
    const worker: WorkerView = {
      ...base,
      cards: [
        base.cards[0]!,
        { ...base.cards[1]!, mig_mode: 'enabled' },
        sliceOf(1, true),
        sliceOf(2, false),
      ],
    };
    const big: QueuedTaskView = { ...task('big', 2, AGED), cards: { count: 2, mig_profile: '3g.40gb' } };
    const sliceTask: QueuedTaskView = {
      ...task('s', 1, FRESH, 60),
      cards: { count: 1, mig_profile: '3g.40gb' },
    };
    const wholeTask = task('wh', 2, FRESH, 60);
    // A whole-card task needing 2 finds one whole card: it may not take the held slice.
    expect(decide(snapshot([worker], [big, wholeTask]), NOW).grants).toEqual([]);
    // A slice task that ends in time takes the held slice.
    expect(decide(snapshot([worker], [big, sliceTask]), NOW).grants).toEqual([
      { task_id: 's', worker_id: 'w0', card_indexes: [migCardIndex(1, 2, 0)], backfilled: true },
    ]);
  });

  it('backfilled grants never share a card with each other, another grant or a reservation', () => {
    const tasks = [
      task('big', 8, AGED),
      task('big2', 8, AGED),
      ...Array.from({ length: 12 }, (_, i) => task(`s${i}`, 1 + (i % 3), FRESH, 60 * (i + 1))),
    ];
    const d = decide(snapshot([halfBusy('w0', NOW + 30 * MIN), halfBusy('w1', NOW + 20 * MIN)], tasks), NOW);
    const seen = new Set<string>();
    for (const g of [...d.grants, ...d.reservations])
      for (const i of g.card_indexes) {
        const key = `${g.worker_id}/${i}`;
        expect(seen.has(key)).toBe(false);
        seen.add(key);
        expect(i).toBeGreaterThanOrEqual(4);
      }
  });
});
