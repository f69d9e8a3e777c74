import { describe, expect, it } from 'vitest';
import { type CardMig, migCardIndex } from '../../../../src/contracts/sample.js';
import { deriveCardState, MIG_MODE_REASON } from '../../../../src/domain/machines/card-state.js';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingConfig,
  SchedulingSnapshot,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';

/**
 * MIG slices as cards (docs/decisions/0046-mig-slices-as-cards.md): a card in MIG mode is never
 * granted whole, and a slice only to a task that asked for slices.
 */

const CONFIG: SchedulingConfig = {
  sample_interval_ms: 2000,
  vram_threshold_pct: 2,
  reservation_after_seconds: 600,
  max_concurrent_cards_per_owner: null,
  require_isolation: true,
};
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
