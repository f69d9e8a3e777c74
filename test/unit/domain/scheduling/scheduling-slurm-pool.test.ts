import { describe, expect, it } from 'vitest';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingConfig,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';

/**
 * A Slurm worker's cards are a pool (docs/decisions/0013-slurm-backend.md): the scheduler offers only
 * total − held slots − cards unavailable for their own reasons, counted separately, so a leased slot
 * whose device number a foreign job uses costs two; multi-node specs go only to Slurm workers.
 */

const NOW = 10_000_000;
const CONFIG: SchedulingConfig = {
  sample_interval_ms: 2000,
  vram_threshold_pct: 2,
  reservation_after_seconds: 600,
  max_concurrent_cards_per_owner: null,
  require_isolation: false,
};

const FOREIGN = [{ pid: 0, name: 'slurm job 7 other', used_memory_mib: null }];

function card(index: number, over: Partial<CardView> = {}): CardView {
  return {
    index,
    model: 'slurm gpu',
    memory_used_mib: null,
    memory_total_mib: null,
    memory_used_pct: 0,
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

function pool(cards: CardView[], backend: 'slurm' | 'local' = 'slurm'): WorkerView {
  return {
    worker_id: 'pool',
    online: true,
    draining: false,
    sampled_at: NOW - 500,
    sampler_error: null,
    isolation: 'none',
    container_engine: null,
    backend,
    cards,
  };
}

let n = 0;
function task(count: number, cards: Partial<QueuedTaskView['cards']> = {}): QueuedTaskView {
  n++;
  return {
    task_id: `t${n}`,
    owner: 'alice',
    priority: 0,
    approved_at: NOW - 1000 + n,
    cards: { count, ...cards },
  };
}

function run(workers: WorkerView[], tasks: QueuedTaskView[]) {
  return decide({ workers, tasks, running_cards_by_owner: {}, config: CONFIG }, NOW);
}

describe('Slurm pool admission', () => {
  it('counts a leased slot and a foreign GPU separately even when they share an index', () => {
    // 8 GPUs: slot 0 leased by the broker, and Slurm shows a foreign job on device 0 (its own job ran
    // elsewhere): 6 are free in Slurm, and a local worker's per-index view would offer 7.
    const cards = Array.from({ length: 8 }, (_, i) =>
      card(i, i === 0 ? { leased: true, processes: FOREIGN } : {}),
    );
    const seven = task(7);
    const six = task(6);
    expect(run([pool(cards, 'local')], [task(7)]).grants).toHaveLength(1);
    const d = run([pool(cards)], [seven, six]);
    expect(d.grants).toEqual([{ task_id: six.task_id, worker_id: 'pool', card_indexes: [1, 2, 3, 4, 5, 6] }]);
    expect(d.waiting[0]?.reason).toMatchObject({ code: 'waiting_for_cards', need: 7, free: 0 });
  });

  it('never grants more than total − held − foreign, over several tasks in one pass', () => {
    const cards = Array.from({ length: 8 }, (_, i) =>
      card(i, { leased: i < 2, processes: i === 2 || i === 5 ? FOREIGN : [] }),
    );
    const d = run([pool(cards)], [task(1), task(1), task(1), task(1), task(1)]);
    expect(d.grants.flatMap((g) => g.card_indexes)).toHaveLength(4);
  });

  it('counts slots held by the worker and unhealthy nodes as unavailable', () => {
    const cards = Array.from({ length: 4 }, (_, i) =>
      card(
        i,
        i === 0
          ? { held_by_worker: true }
          : i === 1
            ? { health: 'failed', health_reasons: ['node down'] }
            : {},
      ),
    );
    expect(run([pool(cards)], [task(3)]).grants).toHaveLength(0);
    expect(run([pool(cards)], [task(2)]).grants).toHaveLength(1);
  });

  it('places a multi-node spec only on a Slurm worker, and explains why elsewhere', () => {
    const cards = Array.from({ length: 8 }, (_, i) => card(i));
    const multi = task(8, { per_node: 4 });
    const local = run([pool(cards, 'local')], [multi]);
    expect(local.grants).toHaveLength(0);
    expect(local.waiting[0]?.reason).toMatchObject({ code: 'multi_node_needs_slurm', need: 8, per_node: 4 });
    expect(String(local.waiting[0]?.reason.message)).toContain('--backend slurm');
    expect(run([pool(cards)], [task(8, { per_node: 4 })]).grants).toHaveLength(1);
  });

  it("checks the pool's node shape: per_node GPUs on enough nodes, or one node for a single-node task", () => {
    const cards = Array.from({ length: 8 }, (_, i) => card(i));
    const twoByFour = { ...pool(cards), pool_node_gpus: [4, 4] };
    expect(run([twoByFour], [task(8, { per_node: 4 })]).grants).toHaveLength(1);
    const wide = run([twoByFour], [task(8, { per_node: 8 })]);
    expect(wide.grants).toHaveLength(0);
    expect(wide.waiting[0]?.reason.code).toBe('no_matching_worker');
    expect(run([twoByFour], [task(6)]).waiting[0]?.reason.code).toBe('no_matching_worker');
    expect(run([twoByFour], [task(4)]).grants).toHaveLength(1);
  });
});
