import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { deriveCardState } from '../../../../src/domain/machines/card-state.js';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import { modelMatches, type RequirementCache } from '../../../../src/domain/scheduling/pool.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingDecision,
  SchedulingSnapshot,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';

const NOW = 50_000_000;
const MODELS = ['NVIDIA A100-SXM4-80GB', 'NVIDIA A10', 'NVIDIA H100 80GB HBM3'];

/** Mostly the common value, sometimes one of the others. */
function mostly<T>(common: T, ...others: T[]): fc.Arbitrary<T> {
  return fc.oneof({ weight: 5, arbitrary: fc.constant(common) }, fc.constantFrom(...others));
}

const cardArb = (index: number, model: string): fc.Arbitrary<CardView> =>
  fc.record({
    index: fc.constant(index),
    model: mostly(model, ...MODELS),
    memory_used_mib: mostly<number | null>(0, 100, 1000, 5000, null),
    memory_total_mib: mostly<number | null>(model === 'NVIDIA A10' ? 24576 : 81920, 24576, null),
    health: mostly<CardView['health']>('ok', 'unknown', 'degraded', 'failed'),
    health_reasons: fc.constant<string[]>([]),
    processes: mostly<CardView['processes']>(
      [],
      [{ pid: 7, name: 'p', used_memory_mib: 1 }],
      [{ pid: 8, name: 'q', used_memory_mib: null }],
    ),
    simulated: fc.boolean(),
    cordoned: mostly(false, true),
    leased: fc.oneof({ weight: 2, arbitrary: fc.constant(false) }, fc.constant(true)),
    quarantined: mostly(false, true),
    broker_pids: mostly<number[]>([], [7], [8, 9]),
  });

const workerArb = (id: number): fc.Arbitrary<WorkerView> =>
  fc.tuple(fc.integer({ min: 0, max: 8 }), fc.constantFrom(...MODELS)).chain(([n, model]) =>
    fc.record({
      worker_id: fc.constant(`w${id}`),
      online: mostly(true, false),
      draining: mostly(false, true),
      sampled_at: fc.oneof(
        { weight: 8, arbitrary: fc.integer({ min: NOW - 6000, max: NOW }) },
        fc.integer({ min: NOW - 60_000, max: NOW - 6001 }),
        fc.constant(null),
      ),
      sampler_error: mostly<string | null>(null, 'smi failed'),
      isolation: mostly<'bwrap' | 'none'>('bwrap', 'none'),
      container_engine: mostly<'podman' | null>(null, 'podman'),
      cards: fc.tuple(...Array.from({ length: n }, (_, i) => cardArb(i, model))),
    }),
  );

const taskArb = (id: number): fc.Arbitrary<QueuedTaskView> =>
  fc
    .record({
      owner: fc.constantFrom('alice', 'bob', 'carol'),
      priority: fc.integer({ min: 0, max: 2 }),
      approved_at: fc.integer({ min: NOW - 1_200_000, max: NOW }),
      count: fc.oneof(
        { weight: 4, arbitrary: fc.integer({ min: 1, max: 2 }) },
        fc.integer({ min: 3, max: 9 }),
      ),
      model: mostly<string | null>(null, 'a100', 'A10', 'h100', 'H200'),
      min_memory_mib: mostly<number | null>(null, 16000, 40000),
      worker: mostly<string | null>(null, 'w0', 'w1', 'w9'),
      runtime: mostly<'process' | 'container'>('process', 'container'),
    })
    .map(({ count, model, min_memory_mib, worker, ...rest }) => ({
      task_id: `t${String(id).padStart(3, '0')}`,
      ...rest,
      cards: {
        count,
        ...(model === null ? {} : { model }),
        ...(min_memory_mib === null ? {} : { min_memory_mib }),
      },
      ...(worker === null ? {} : { worker }),
    }));

const snapshotArb: fc.Arbitrary<SchedulingSnapshot> = fc
  .tuple(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 30 }))
  .chain(([workers, tasks]) =>
    fc.record({
      workers: fc.tuple(...Array.from({ length: workers }, (_, i) => workerArb(i))),
      tasks: fc.tuple(...Array.from({ length: tasks }, (_, i) => taskArb(i))),
      running_cards_by_owner: fc.record(
        { alice: fc.integer({ min: 0, max: 6 }), bob: fc.integer({ min: 0, max: 6 }) },
        { requiredKeys: [] },
      ),
      config: fc.record({
        sample_interval_ms: fc.constant(2000),
        vram_threshold_pct: fc.constantFrom(1, 2, 5),
        reservation_after_seconds: fc.constantFrom(0, 300, 600, 3600),
        max_concurrent_cards_per_owner: fc.oneof(fc.constant(null), fc.integer({ min: 1, max: 12 })),
        require_isolation: fc.boolean(),
      }),
    }),
  );

/** Cards free for scheduling at the start of the pass, as "worker/index" keys. */
function eligibleCards(snap: SchedulingSnapshot): Map<string, { worker: WorkerView; card: CardView }> {
  const out = new Map<string, { worker: WorkerView; card: CardView }>();
  for (const worker of snap.workers) {
    if (!worker.online || worker.draining) continue;
    for (const card of worker.cards) {
      if (deriveCardState({ card, worker }, NOW, snap.config).state === 'AVAILABLE') {
        out.set(`${worker.worker_id}/${card.index}`, { worker, card });
      }
    }
  }
  return out;
}

function fitsTask(
  task: QueuedTaskView,
  worker: WorkerView,
  card: CardView,
  config: SchedulingSnapshot['config'],
): boolean {
  if (config.require_isolation && worker.isolation === 'none') return false;
  if (task.runtime === 'container' && worker.container_engine === null) return false;
  if (task.worker !== undefined && task.worker !== worker.worker_id) return false;
  if (task.cards.model !== undefined && !modelMatches(card.model, task.cards.model)) return false;
  const min = task.cards.min_memory_mib;
  return min === undefined || (card.memory_total_mib !== null && card.memory_total_mib >= min);
}

function checkInvariants(snap: SchedulingSnapshot, d: SchedulingDecision): void {
  const eligible = eligibleCards(snap);
  const byId = new Map(snap.tasks.map((t) => [t.task_id, t]));
  const used = new Set<string>();
  const cardsByOwner = new Map<string, number>();
  for (const g of d.grants) {
    const task = byId.get(g.task_id);
    expect(task).toBeDefined();
    if (task === undefined) continue;
    // Exactly cards.count distinct cards, ascending, all on one worker.
    expect(g.card_indexes).toHaveLength(task.cards.count);
    expect([...g.card_indexes].sort((a, b) => a - b)).toEqual(g.card_indexes);
    expect(new Set(g.card_indexes).size).toBe(g.card_indexes.length);
    for (const index of g.card_indexes) {
      const key = `${g.worker_id}/${index}`;
      // Never a card twice in a pass, never an ineligible or non-matching card.
      expect(used.has(key)).toBe(false);
      used.add(key);
      const found = eligible.get(key);
      expect(found).toBeDefined();
      if (found !== undefined) expect(fitsTask(task, found.worker, found.card, snap.config)).toBe(true);
    }
    cardsByOwner.set(task.owner, (cardsByOwner.get(task.owner) ?? 0) + task.cards.count);
  }
  // Quota holds for every owner that got a grant.
  const limit = snap.config.max_concurrent_cards_per_owner;
  if (limit !== null) {
    for (const [owner, granted] of cardsByOwner) {
      expect((snap.running_cards_by_owner[owner] ?? 0) + granted).toBeLessThanOrEqual(limit);
    }
  }
  // Reserved cards are eligible, matching, and neither granted nor reserved twice.
  const waitingIds = new Set(d.waiting.map((w) => w.task_id));
  for (const r of d.reservations) {
    const task = byId.get(r.task_id);
    expect(waitingIds.has(r.task_id)).toBe(true);
    expect(r.card_indexes.length).toBeGreaterThan(0);
    for (const index of r.card_indexes) {
      const key = `${r.worker_id}/${index}`;
      expect(used.has(key)).toBe(false);
      used.add(key);
      const found = eligible.get(key);
      expect(found).toBeDefined();
      if (found !== undefined && task !== undefined)
        expect(fitsTask(task, found.worker, found.card, snap.config)).toBe(true);
    }
  }
  // Every queued task exactly once; positions 1..k in order.
  const seen = [...d.grants.map((g) => g.task_id), ...d.waiting.map((w) => w.task_id)];
  expect(seen.sort()).toEqual(snap.tasks.map((t) => t.task_id).sort());
  expect(d.waiting.map((w) => w.position)).toEqual(d.waiting.map((_, i) => i + 1));
  for (const w of d.waiting) expect(w.reason.message.length).toBeGreaterThan(0);
}

function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2147483648;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

describe('decide (properties)', () => {
  it('grants only eligible, matching, unshared cards, and accounts for every task once', () => {
    fc.assert(
      fc.property(snapshotArb, (snap) => {
        checkInvariants(snap, decide(snap, NOW));
      }),
      { numRuns: 400 },
    );
  });

  it('is deterministic and ignores the order of its inputs', () => {
    fc.assert(
      fc.property(snapshotArb, fc.nat(), (snap, seed) => {
        const first = decide(snap, NOW);
        expect(decide(structuredClone(snap), NOW)).toEqual(first);
        const reordered: SchedulingSnapshot = {
          ...snap,
          tasks: shuffled(snap.tasks, seed),
          workers: shuffled(snap.workers, seed + 1).map((w) => ({
            ...w,
            cards: shuffled(w.cards, seed + 2),
          })),
        };
        expect(decide(reordered, NOW)).toEqual(first);
      }),
      { numRuns: 200 },
    );
  });

  it('decides the same with a requirement cache kept across passes, however the snapshot changes', () => {
    fc.assert(
      fc.property(snapshotArb, snapshotArb, (a, b) => {
        // One cache over two passes whose queues share task view objects (as the scheduler's do).
        const cache: RequirementCache = new WeakMap();
        const second: SchedulingSnapshot = { ...b, tasks: [...a.tasks.slice(0, 3), ...b.tasks] };
        expect(decide(a, NOW, cache)).toEqual(decide(a, NOW));
        expect(decide(second, NOW, cache)).toEqual(decide(second, NOW));
      }),
      { numRuns: 200 },
    );
  });

  it('does not change its input', () => {
    fc.assert(
      fc.property(snapshotArb, (snap) => {
        const before = structuredClone(snap);
        decide(snap, NOW);
        expect(snap).toEqual(before);
      }),
      { numRuns: 100 },
    );
  });

  it('grants every task when there are enough free cards for all of them', () => {
    const workerIds = fc.uniqueArray(fc.integer({ min: 0, max: 99 }), { minLength: 1, maxLength: 4 });
    fc.assert(
      fc.property(workerIds, fc.array(fc.integer({ min: 1, max: 2 }), { maxLength: 4 }), (ids, counts) => {
        const workers: WorkerView[] = ids.map((id) => ({
          worker_id: `w${id}`,
          online: true,
          draining: false,
          sampled_at: NOW,
          sampler_error: null,
          isolation: 'bwrap',
          container_engine: null,
          cards: Array.from({ length: 8 }, (_, index) => ({
            index,
            model: 'sim',
            memory_used_mib: 0,
            memory_total_mib: 1024,
            health: 'ok' as const,
            health_reasons: [],
            processes: [],
            simulated: true,
            cordoned: false,
            leased: false,
            quarantined: false,
            broker_pids: [],
          })),
        }));
        const tasks = counts.map((count, i) => ({
          task_id: `t${i}`,
          owner: 'o',
          priority: 0,
          approved_at: NOW - i,
          cards: { count },
        }));
        const config = {
          sample_interval_ms: 2000,
          reservation_after_seconds: 0,
          max_concurrent_cards_per_owner: null,
          require_isolation: true,
        };
        const d = decide({ workers, tasks, running_cards_by_owner: {}, config }, NOW);
        expect(d.grants).toHaveLength(tasks.length);
        expect(d.waiting).toEqual([]);
      }),
      { numRuns: 100 },
    );
  });
});
