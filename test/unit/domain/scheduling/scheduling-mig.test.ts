import { describe, expect, it } from 'vitest';
import { type CardMig, migCardIndex } from '../../../../src/contracts/sample.js';
import { deriveCardState, MIG_MODE_REASON } from '../../../../src/domain/machines/card-state.js';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingSnapshot,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';
import { SCHEDULING_CONFIG } from '../../../support/scheduling-views.js';

/**
 * MIG slices as cards (docs/decisions/0046-mig-slices-as-cards.md): a card in MIG mode is never
 * granted whole, and a slice only to a task that asked for slices.
 */

const CONFIG = SCHEDULING_CONFIG;
const NOW = 1_000;

/** Compute slices and memory of the H100-80GB profiles a test names. */
const PROFILES: Record<string, { slices: number; mib: number }> = {
  '1g.10gb': { slices: 1, mib: 9984 },
  '1g.20gb': { slices: 1, mib: 20091 },
  '2g.20gb': { slices: 2, mib: 20091 },
  '3g.40gb': { slices: 3, mib: 40448 },
  '4g.40gb': { slices: 4, mib: 40448 },
};

function whole(index: number, over: Partial<CardView> = {}): CardView {
  return {
    index,
    model: 'NVIDIA H100 80GB HBM3',
    memory_used_mib: 0,
    memory_total_mib: 81559,
    health: 'ok',
    health_reasons: [],
    processes: [],
    simulated: false,
    cordoned: false,
    leased: false,
    quarantined: false,
    broker_pids: [],
    ...over,
  };
}

function slice(parent: number, gi: number, profile: string, over: Partial<CardView> = {}): CardView {
  const p = PROFILES[profile]!;
  const mig: CardMig = {
    parent_index: parent,
    parent_uuid: `GPU-${parent}`,
    profile,
    gpu_instance_profile: profile,
    gpu_instance: gi,
    compute_instance: 0,
    compute_slices: p.slices,
    gi_access_minor: 3 + 135 * parent + 9 * gi,
    ci_access_minor: 4 + 135 * parent + 9 * gi,
    memory_source: 'instance',
  };
  return whole(migCardIndex(parent, gi, 0), { memory_total_mib: p.mib, mig, ...over });
}

/** Card `parent` in MIG mode, followed by its slices. */
function migCard(parent: number, profiles: readonly string[]): CardView[] {
  return [whole(parent, { mig_mode: 'enabled' }), ...profiles.map((p, i) => slice(parent, i + 1, p))];
}

function worker(id: string, cards: CardView[]): WorkerView {
  return {
    worker_id: id,
    online: true,
    draining: false,
    sampled_at: NOW,
    sampler_error: null,
    isolation: 'bwrap',
    container_engine: null,
    cards,
  };
}

let seq = 0;
function task(cards: QueuedTaskView['cards'], over: Partial<QueuedTaskView> = {}): QueuedTaskView {
  seq += 1;
  return {
    task_id: `t${String(seq).padStart(3, '0')}`,
    owner: 'agent',
    priority: 0,
    approved_at: seq,
    cards,
    ...over,
  };
}

function run(workers: WorkerView[], tasks: QueuedTaskView[]) {
  const snapshot: SchedulingSnapshot = { workers, tasks, running_cards_by_owner: {}, config: CONFIG };
  return decide(snapshot, NOW);
}

const SEVEN = ['1g.10gb', '1g.10gb', '1g.10gb', '1g.10gb', '1g.10gb', '1g.10gb', '1g.10gb'];

describe('a card in MIG mode', () => {
  it('is never granted whole: its state is CORDONED with the MIG reason', () => {
    const parent = whole(0, { mig_mode: 'enabled' });
    const w = worker('w1', [parent]);
    expect(deriveCardState({ card: parent, worker: w }, NOW, CONFIG)).toEqual({
      state: 'CORDONED',
      reasons: [MIG_MODE_REASON],
    });
    const d = run([w], [task({ count: 1 })]);
    expect(d.grants).toEqual([]);
  });

  it('a whole-card task never takes a slice, however many are free, and whole cards beside them still go', () => {
    const w = worker('w1', [...migCard(0, SEVEN), whole(1)]);
    const first = task({ count: 1 });
    const second = task({ count: 1 });
    const d = run([w], [first, second]);
    expect(d.grants).toEqual([{ task_id: first.task_id, worker_id: 'w1', card_indexes: [1] }]);
    expect(d.waiting.find((x) => x.task_id === second.task_id)?.reason.code).toBe('waiting_for_cards');
  });
});

describe('a task that asks for slices (cards.mig_profile, cards.allow_mig)', () => {
  it('7 one-slice tasks run at once on one card split 7 ways, where one whole-card task would', () => {
    const w = worker('w1', migCard(0, SEVEN));
    const tasks = Array.from({ length: 7 }, () => task({ count: 1, mig_profile: '1g.10gb' }));
    const d = run([w], tasks);
    expect(d.grants).toHaveLength(7);
    const indexes = d.grants.flatMap((g) => g.card_indexes);
    expect(new Set(indexes).size).toBe(7);
    expect(indexes.every((i) => i >= 256)).toBe(true);
    // The same card not in MIG mode: one task.
    const whole1 = run(
      [worker('w1', [whole(0)])],
      tasks.map((t) => ({ ...t, cards: { count: 1 } })),
    );
    expect(whole1.grants).toHaveLength(1);
  });

  it('mig_profile takes only slices of that profile, never a whole card or another profile', () => {
    const w = worker('w1', [whole(1), ...migCard(0, ['3g.40gb', '2g.20gb', '1g.10gb'])]);
    const t = task({ count: 1, mig_profile: '2g.20gb' });
    expect(run([w], [t]).grants).toEqual([
      { task_id: t.task_id, worker_id: 'w1', card_indexes: [migCardIndex(0, 2, 0)] },
    ]);
    const none = task({ count: 1, mig_profile: '7g.80gb' });
    const d = run([w], [none]);
    expect(d.grants).toEqual([]);
    const reason = d.waiting.find((x) => x.task_id === none.task_id)?.reason;
    expect(reason?.code).toBe('no_matching_worker');
    expect(reason?.message).toContain('(MIG 7g.80gb slices)');
  });

  it('allow_mig with min_memory_mib takes the smallest slice that fits, on any worker, before a whole card', () => {
    const a = worker('a', [whole(0), ...migCard(1, ['3g.40gb'])]);
    const b = worker('b', migCard(0, ['3g.40gb', '2g.20gb', '1g.10gb', '1g.10gb']));
    const t = task({ count: 1, min_memory_mib: 10_000, allow_mig: true });
    // 1g.10gb has 9984 MiB: too small; 2g.20gb on b is the smallest that fits.
    expect(run([a, b], [t]).grants).toEqual([
      { task_id: t.task_id, worker_id: 'b', card_indexes: [migCardIndex(0, 2, 0)] },
    ]);
    const big = task({ count: 1, min_memory_mib: 50_000, allow_mig: true });
    expect(run([a, b], [big]).grants).toEqual([{ task_id: big.task_id, worker_id: 'a', card_indexes: [0] }]);
  });

  it('several slices of one profile go to one worker, one parent first', () => {
    const w = worker('w1', [...migCard(0, ['1g.10gb', '1g.10gb', '3g.40gb']), ...migCard(1, SEVEN)]);
    const t = task({ count: 2, mig_profile: '1g.10gb' });
    expect(run([w], [t]).grants[0]?.card_indexes).toEqual([migCardIndex(0, 1, 0), migCardIndex(0, 2, 0)]);
    const seven = task({ count: 7, mig_profile: '1g.10gb' });
    expect(run([w], [seven]).grants[0]?.card_indexes.map((i) => Math.floor((i - 256) / 128))).toEqual([
      0, 0, 1, 1, 1, 1, 1,
    ]);
  });

  it('a slice whose capability minors are unknown is never granted (the sandbox could not bind it)', () => {
    const broken = slice(0, 1, '1g.10gb');
    const w = worker('w1', [
      whole(0, { mig_mode: 'enabled' }),
      { ...broken, mig: { ...broken.mig!, ci_access_minor: null } },
    ]);
    expect(run([w], [task({ count: 1, mig_profile: '1g.10gb' })]).grants).toEqual([]);
  });

  it('a whole-card task on a worker with only MIG cards waits as no_matching_worker, not cordoned', () => {
    const w = worker('w1', migCard(0, SEVEN));
    const t = task({ count: 1 });
    const d = run([w], [t]);
    expect(d.waiting.find((x) => x.task_id === t.task_id)?.reason.code).toBe('no_matching_worker');
  });

  it('a leased slice stays leased; the rest of its card still goes', () => {
    const cards = migCard(0, ['1g.10gb', '1g.10gb']);
    cards[1] = { ...cards[1]!, leased: true };
    const t = task({ count: 1, mig_profile: '1g.10gb' });
    expect(run([worker('w1', cards)], [t]).grants[0]?.card_indexes).toEqual([migCardIndex(0, 2, 0)]);
  });

  it('one pass over mixed asks grants each free card once, whole cards to whole asks, slices to slice asks', () => {
    const workers = [
      worker('a', [whole(0), whole(1), ...migCard(2, SEVEN)]),
      worker('b', [...migCard(0, ['3g.40gb', '2g.20gb', '1g.10gb', '1g.10gb']), whole(1)]),
    ];
    const asks: Array<QueuedTaskView['cards']> = [
      { count: 1 },
      { count: 1, mig_profile: '1g.10gb' },
      { count: 1, min_memory_mib: 9000, allow_mig: true },
      { count: 2, mig_profile: '1g.10gb' },
    ];
    const tasks = Array.from({ length: 40 }, (_, i) => task(asks[i % asks.length]!));
    const d = run(workers, tasks);
    const taken = d.grants.flatMap((g) => g.card_indexes.map((i) => `${g.worker_id}/${i}`));
    expect(new Set(taken).size).toBe(taken.length);
    // Every leasable card went: 3 whole cards and 11 slices (the 3g.40gb and 2g.20gb to allow_mig asks).
    expect(taken).toHaveLength(14);
    for (const g of d.grants) {
      const ask = tasks.find((t) => t.task_id === g.task_id)!.cards;
      const slices = g.card_indexes.filter((i) => i >= 256).length;
      if (ask.mig_profile === undefined && ask.allow_mig !== true) expect(slices).toBe(0);
      if (ask.mig_profile !== undefined) expect(slices).toBe(ask.count);
    }
  });
});

describe('a queue of like tasks with a memory floor (the pool remembers counts per slot until a card is marked)', () => {
  it('gets exactly the cards that fit, one each, however many ask; the rest wait for cards', () => {
    // w1: a card split 1g.10gb ×2 + 3g.40gb; w2: two whole cards. A 9,000 MiB floor fits all five;
    // a 20,000 MiB floor only the 3g.40gb slice and the whole cards.
    const workers = [
      worker('w1', migCard(0, ['1g.10gb', '1g.10gb', '3g.40gb'])),
      worker('w2', [whole(0), whole(1)]),
    ];
    const small = Array.from({ length: 4 }, () => task({ count: 1, min_memory_mib: 9000, allow_mig: true }));
    const big = Array.from({ length: 3 }, () => task({ count: 1, min_memory_mib: 20000, allow_mig: true }));
    const d = run(workers, [...small, ...big]);
    const granted = d.grants.map((g) => `${g.worker_id}/${g.card_indexes.join(',')}`);
    // Every card granted once; smallest first: the small tasks take the 1g slices, then the 3g, then a
    // whole card; the first big task the one whole card left, and the other two wait.
    expect(new Set(granted).size).toBe(granted.length);
    expect(granted).toEqual([
      `w1/${migCardIndex(0, 1, 0)}`,
      `w1/${migCardIndex(0, 2, 0)}`,
      `w1/${migCardIndex(0, 3, 0)}`,
      'w2/0',
      'w2/1',
    ]);
    expect(d.grants.map((g) => g.task_id)).toEqual([...small, big[0]!].map((t) => t.task_id));
    expect(d.waiting.map((w) => [w.task_id, w.reason.code])).toEqual([
      [big[1]!.task_id, 'waiting_for_cards'],
      [big[2]!.task_id, 'waiting_for_cards'],
    ]);
  });

  it('a slot whose fitting card was just taken counts none left, though other cards of it are still open', () => {
    // w1: a 3g.40gb slice (fits 20,000 MiB) beside two 1g.10gb slices (do not); w2: one whole card.
    const workers = [worker('w1', migCard(0, ['3g.40gb', '1g.10gb', '1g.10gb'])), worker('w2', [whole(0)])];
    const big = Array.from({ length: 2 }, () => task({ count: 1, min_memory_mib: 20000, allow_mig: true }));
    const d = run(workers, big);
    // The first takes the slice (smallest that fits); the second must go to w2, never to w1 again.
    expect(d.grants).toEqual([
      { task_id: big[0]!.task_id, worker_id: 'w1', card_indexes: [migCardIndex(0, 1, 0)] },
      { task_id: big[1]!.task_id, worker_id: 'w2', card_indexes: [0] },
    ]);
  });
});
