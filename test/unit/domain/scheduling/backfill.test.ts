import { describe, expect, it } from 'vitest';
import { BACKFILL_MARGIN_SECONDS, decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  QueuedTaskView,
  SchedulingSnapshot,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';
import { SCHEDULING_CONFIG, simWorkerView } from '../../../support/scheduling-views.js';

/**
 * Backfill into reservations (ADR 0049, src/domain/scheduling/pool.ts `backfill`): an aged task holds
 * the free cards of the worker where it fits first, and a later task may take one of them only when its
 * time limit (a hard stop) plus the margin ends before the leases the aged task waits for end at the
 * latest. Anything not known (a lease's end, a task's limit) promises nothing.
 */

const NOW = 1_000; // the helpers' workers sampled at 1,000 ms: fresh samples
const MIN = 60_000;
const MARGIN = BACKFILL_MARGIN_SECONDS * 1000;

/** w0: cards 0-3 leased, ending by `endsBy` (undefined: not known); 4-7 free. */
function halfBusy(endsBy: number | undefined): WorkerView {
  const w = simWorkerView('w0', [0, 1, 2, 3]);
  return {
    ...w,
    cards: w.cards.map((c) => (c.leased && endsBy !== undefined ? { ...c, lease_ends_by: endsBy } : c)),
  };
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

function snapshot(workers: WorkerView[], tasks: QueuedTaskView[]): SchedulingSnapshot {
  return { workers, tasks, running_cards_by_owner: {}, config: SCHEDULING_CONFIG };
}

const AGED = NOW - 20 * MIN;
const FRESH = NOW - MIN;

describe('backfill into an aged task’s reservation', () => {
  it('a task whose limit ends before the awaited leases do takes a held card; the reservation lists what it still holds', () => {
    // The leases end by NOW + 30 min; a 10-minute task (+ margin) ends well before.
    const d = decide(
      snapshot([halfBusy(NOW + 30 * MIN)], [task('big', 8, AGED), task('small', 1, FRESH, 600)]),
      NOW,
    );
    // Marked: the master enforces its limit plus the start-up allowance from the grant (ADR 0049 §5).
    expect(d.grants).toEqual([{ task_id: 'small', worker_id: 'w0', card_indexes: [4], backfilled: true }]);
    expect(d.reservations).toEqual([{ task_id: 'big', worker_id: 'w0', card_indexes: [5, 6, 7] }]);
  });

  it('a task placed on open cards is not marked backfilled, with or without a limit', () => {
    const d = decide(
      snapshot([halfBusy(NOW + 30 * MIN)], [task('a', 1, FRESH, 600), task('b', 1, FRESH)]),
      NOW,
    );
    expect(d.grants.map((g) => [g.task_id, g.backfilled])).toEqual([
      ['a', undefined],
      ['b', undefined],
    ]);
  });

  it('a task that could still run when the aged one could start waits behind it', () => {
    // 30-minute limit + margin ends after NOW + 30 min: it would delay the aged task.
    const d = decide(
      snapshot([halfBusy(NOW + 30 * MIN)], [task('big', 8, AGED), task('small', 1, FRESH, 1800)]),
      NOW,
    );
    expect(d.grants).toEqual([]);
    expect(d.reservations).toEqual([{ task_id: 'big', worker_id: 'w0', card_indexes: [4, 5, 6, 7] }]);
    expect(d.waiting.find((w) => w.task_id === 'small')!.reason.code).toBe('reserved_for_older_task');
  });

  it('the bound is the limit plus the margin: exactly at the awaited end it fits, a second later it does not', () => {
    const endsBy = NOW + 30 * MIN;
    const fits = (NOW + 30 * MIN - MARGIN - NOW) / 1000;
    const at = decide(snapshot([halfBusy(endsBy)], [task('big', 8, AGED), task('s', 1, FRESH, fits)]), NOW);
    expect(at.grants.map((g) => g.task_id)).toEqual(['s']);
    const over = decide(
      snapshot([halfBusy(endsBy)], [task('big', 8, AGED), task('s', 1, FRESH, fits + 1)]),
      NOW,
    );
    expect(over.grants).toEqual([]);
  });

  it('no limit on the task, or no known end of a lease the aged task waits for: nothing is backfilled', () => {
    const noLimit = decide(
      snapshot([halfBusy(NOW + 30 * MIN)], [task('big', 8, AGED), task('s', 1, FRESH)]),
      NOW,
    );
    expect(noLimit.grants).toEqual([]);
    const unknownEnd = decide(
      snapshot([halfBusy(undefined)], [task('big', 8, AGED), task('s', 1, FRESH, 60)]),
      NOW,
    );
    expect(unknownEnd.grants).toEqual([]);
    // One of the four awaited leases has no known end: the aged task's start is not bounded, so no promise.
    const w = halfBusy(NOW + 30 * MIN);
    const oneUnknown = {
      ...w,
      cards: w.cards.map((c) => (c.index === 3 ? { ...c, lease_ends_by: undefined } : c)),
    };
    expect(
      decide(snapshot([oneUnknown], [task('big', 8, AGED), task('s', 1, FRESH, 60)]), NOW).grants,
    ).toEqual([]);
  });

  it('the shadow is the latest end among the cards it waits for, not the earliest', () => {
    // Cards 0-1 end in 5 min, 2-3 in 40 min: the aged task cannot start before 40 min.
    const w = simWorkerView('w0', [0, 1, 2, 3]);
    const worker = {
      ...w,
      cards: w.cards.map((c) => (c.leased ? { ...c, lease_ends_by: NOW + (c.index < 2 ? 5 : 40) * MIN } : c)),
    };
    const d = decide(snapshot([worker], [task('big', 8, AGED), task('s', 1, FRESH, 20 * 60)]), NOW);
    expect(d.grants.map((g) => g.task_id)).toEqual(['s']);
  });

  it('backfilled tasks take at most the held cards whose shadow they fit; a second one takes the next card', () => {
    const d = decide(
      snapshot(
        [halfBusy(NOW + 30 * MIN)],
        [
          task('big', 8, AGED),
          task('s1', 2, FRESH, 600),
          task('s2', 2, FRESH, 600),
          task('s3', 1, FRESH, 600),
        ],
      ),
      NOW,
    );
    expect(d.grants.map((g) => [g.task_id, g.card_indexes])).toEqual([
      ['s1', [4, 5]],
      ['s2', [6, 7]],
    ]);
    expect(d.reservations[0]!.card_indexes).toEqual([]);
  });

  it('a multi-card task never backfills across workers; open cards elsewhere go first', () => {
    const other = simWorkerView('w1', [0, 1, 2, 3, 4, 5, 6]);
    const d = decide(
      snapshot([halfBusy(NOW + 30 * MIN), other], [task('big', 8, AGED), task('s', 1, FRESH, 600)]),
      NOW,
    );
    // w1's open card 7 is placed first (plain best fit); nothing of the reservation is taken.
    expect(d.grants).toEqual([{ task_id: 's', worker_id: 'w1', card_indexes: [7] }]);
    expect(d.reservations[0]!.card_indexes).toEqual([4, 5, 6, 7]);
  });
});
