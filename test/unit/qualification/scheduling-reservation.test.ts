import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decide } from '../../../src/domain/scheduling/decide.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingSnapshot,
  WorkerView,
} from '../../../src/domain/scheduling/types.js';

/**
 * Cards a qualification run cordoned for itself (docs/decisions/0008-qualification-cordons.md): to
 * every other task they are cordoned; the run's own tasks may use them, and only them.
 */

const NOW = 10_000_000;

function card(index: number, over: Partial<CardView> = {}): CardView {
  return {
    index,
    model: 'Simulated GPU',
    memory_used_mib: 0,
    memory_total_mib: 81920,
    health: 'ok',
    health_reasons: [],
    processes: [],
    simulated: true,
    cordoned: false,
    leased: false,
    quarantined: false,
    broker_pids: [],
    ...over,
  };
}

/** 8 cards; the first `reserved` are cordoned for run `run`. */
function worker(reserved: number, run = 'qrun_A', id = 'w1'): WorkerView {
  return {
    worker_id: id,
    online: true,
    draining: false,
    sampled_at: NOW - 100,
    sampler_error: null,
    isolation: 'bwrap',
    container_engine: null,
    cards: Array.from({ length: 8 }, (_, i) =>
      i < reserved ? card(i, { cordoned: true, reserved_for_run: run }) : card(i),
    ),
  };
}

let seq = 0;
function task(count: number, over: Partial<QueuedTaskView> = {}): QueuedTaskView {
  seq++;
  return {
    task_id: `t${String(seq).padStart(4, '0')}`,
    owner: 'alice',
    priority: 0,
    approved_at: NOW - 1000 + seq,
    cards: { count },
    ...over,
  };
}

function snap(workers: WorkerView[], tasks: QueuedTaskView[]): SchedulingSnapshot {
  return {
    workers,
    tasks,
    running_cards_by_owner: {},
    config: {
      sample_interval_ms: 1000,
      vram_threshold_pct: 2,
      reservation_after_seconds: 300,
      max_concurrent_cards_per_owner: null,
      require_isolation: true,
    },
  };
}

describe('decide with cards reserved for a qualification run', () => {
  it('grants the run’s task the reserved cards, even though they are cordoned', () => {
    const t = task(4, { owner: 'qual-sub', worker: 'w1', run_id: 'qrun_A' });
    const d = decide(snap([worker(8)], [t]), NOW);
    expect(d.grants).toEqual([{ task_id: t.task_id, worker_id: 'w1', card_indexes: [0, 1, 2, 3] }]);
  });

  it('keeps every other task off them, as a cordon does', () => {
    const other = task(1);
    const d = decide(snap([worker(8)], [other]), NOW);
    expect(d.grants).toEqual([]);
    expect(d.waiting[0]?.reason).toMatchObject({ code: 'cordoned', need: 1, uncordoned: 0 });
  });

  it('lets other tasks use the cards the run did not reserve, and the run only its own', () => {
    const other = task(2);
    const mine = task(4, { run_id: 'qrun_A', worker: 'w1' });
    const d = decide(snap([worker(4)], [mine, other]), NOW);
    expect(d.grants).toHaveLength(2);
    expect(d.grants).toEqual(
      expect.arrayContaining([
        { task_id: mine.task_id, worker_id: 'w1', card_indexes: [0, 1, 2, 3] },
        { task_id: other.task_id, worker_id: 'w1', card_indexes: [4, 5] },
      ]),
    );
    // More than the run reserved never spills onto the unreserved cards.
    const big = task(6, { run_id: 'qrun_A', worker: 'w1' });
    const d2 = decide(snap([worker(4)], [big]), NOW);
    expect(d2.grants).toEqual([]);
    expect(d2.waiting[0]?.reason).toMatchObject({ code: 'cordoned', need: 6, uncordoned: 4 });
  });

  it('does not let one run take another run’s cards', () => {
    const t = task(1, { run_id: 'qrun_B', worker: 'w1' });
    const d = decide(snap([worker(8, 'qrun_A')], [t]), NOW);
    expect(d.grants).toEqual([]);
    expect(d.waiting[0]?.reason.code).toBe('cordoned');
  });

  it('an 8-card task waits on a reserved worker as cordoned, not as impossible', () => {
    const t = task(8);
    const d = decide(snap([worker(2)], [t]), NOW);
    expect(d.waiting[0]?.reason).toMatchObject({ code: 'cordoned', need: 8, uncordoned: 6 });
  });

  it('a reserved card that is leased or busy is not granted to the run either', () => {
    const w = worker(8);
    (w.cards[0] as CardView).leased = true;
    (w.cards[1] as CardView).processes = [{ pid: 7, name: 'other', used_memory_mib: 1 }];
    const t = task(2, { run_id: 'qrun_A', worker: 'w1' });
    const d = decide(snap([w], [t]), NOW);
    expect(d.grants).toEqual([{ task_id: t.task_id, worker_id: 'w1', card_indexes: [2, 3] }]);
  });
});

describe('decide with reservations: property', () => {
  const RUNS = [null, 'qrun_A', 'qrun_B'] as const;
  const workerArb = (id: number): fc.Arbitrary<WorkerView> =>
    fc
      .array(fc.record({ run: fc.constantFrom(...RUNS), cordoned: fc.boolean(), leased: fc.boolean() }), {
        minLength: 0,
        maxLength: 8,
      })
      .map((cards) => ({
        worker_id: `w${id}`,
        online: true,
        draining: false,
        sampled_at: NOW - 100,
        sampler_error: null,
        isolation: 'bwrap' as const,
        container_engine: null,
        // A reserved card is always cordoned (the run's cordon); others are cordoned at random.
        cards: cards.map((c, i) =>
          card(i, { cordoned: c.run !== null || c.cordoned, leased: c.leased, reserved_for_run: c.run }),
        ),
      }));
  const taskArb = (id: number): fc.Arbitrary<QueuedTaskView> =>
    fc
      .record({ count: fc.integer({ min: 1, max: 4 }), run: fc.constantFrom(...RUNS), pin: fc.boolean() })
      .map((t) => ({
        task_id: `t${id}`,
        owner: t.run ?? 'alice',
        priority: 0,
        approved_at: NOW - 10_000 + id,
        cards: { count: t.count },
        ...(t.run !== null ? { run_id: t.run } : {}),
        ...(t.pin ? { worker: 'w0' } : {}),
      }));

  it('grants a reserved card only to its run, a run’s task only its run’s cards, never a leased or operator-cordoned card', () => {
    fc.assert(
      fc.property(
        fc.tuple(workerArb(0), workerArb(1)),
        fc
          .array(fc.nat(), { minLength: 1, maxLength: 12 })
          .chain((xs) => fc.tuple(...xs.map((_, i) => taskArb(i)))),
        (workers, tasks) => {
          const d = decide(snap(workers, tasks), NOW);
          const used = new Set<string>();
          for (const g of d.grants) {
            const t = tasks.find((x) => x.task_id === g.task_id)!;
            const w = workers.find((x) => x.worker_id === g.worker_id)!;
            expect(g.card_indexes).toHaveLength(t.cards.count);
            for (const i of g.card_indexes) {
              const c = w.cards.find((x) => x.index === i)!;
              expect(c.reserved_for_run ?? null).toBe(t.run_id ?? null);
              expect(c.leased).toBe(false);
              if ((c.reserved_for_run ?? null) === null) expect(c.cordoned).toBe(false);
              const key = `${w.worker_id}/${i}`;
              expect(used.has(key)).toBe(false);
              used.add(key);
            }
          }
          expect(d.grants.length + d.waiting.length).toBe(tasks.length);
        },
      ),
      { numRuns: 300 },
    );
  });
});
