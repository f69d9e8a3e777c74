import { type CardMig, migCardIndex } from '../src/contracts/sample.js';
import { decide } from '../src/domain/scheduling/decide.js';
import type { RequirementCache } from '../src/domain/scheduling/pool.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingConfig,
  SchedulingSnapshot,
  WorkerView,
} from '../src/domain/scheduling/types.js';
import type { BenchSection, OpResult } from './stats.js';
import { summarise } from './stats.js';
import { benchCard } from './views.js';

/**
 * A scheduling pass over a pool that mixes whole cards and MIG slices (docs/decisions/0046-mig-slices-as-cards.md):
 * `decide` alone (no store), 10,000 queued tasks, against today's pool of 64 workers × 8 whole cards.
 * Mixed: 32 workers of 8 whole cards, and 32 workers whose 8 cards are each in MIG mode with seven
 * 1g.10gb slices (8 + 56 cards each: 2304 in all); the queue alternates 1-card tasks, `mig_profile`
 * 1g.10gb tasks and `allow_mig` tasks with `min_memory_mib` 9000. Each row is one full pass (every free
 * card granted, every other task explained); the bound is the mixed pass within 1.5× of today's.
 */

const WORKERS = 64;
const CARDS = 8;
const SLICES = 7;
const TASKS = 10_000;
const PASSES = 30;
const NOW = 1_000_000;

const CONFIG: SchedulingConfig = {
  sample_interval_ms: 2000,
  vram_threshold_pct: 2,
  reservation_after_seconds: 600,
  max_concurrent_cards_per_owner: null,
  require_isolation: true,
};

function card(index: number, over: Partial<CardView> = {}): CardView {
  return benchCard(index, { simulated: true, ...over });
}

function slice(parent: number, gi: number): CardView {
  const mig: CardMig = {
    parent_index: parent,
    parent_uuid: `GPU-${parent}`,
    profile: '1g.10gb',
    gpu_instance_profile: '1g.10gb',
    gpu_instance: gi,
    compute_instance: 0,
    compute_slices: 1,
    gi_access_minor: 3 + 135 * parent + 9 * gi,
    ci_access_minor: 4 + 135 * parent + 9 * gi,
    memory_source: 'profile-table',
  };
  return card(migCardIndex(parent, gi, 0), { memory_total_mib: 9984, mig });
}

function worker(w: number, mig: boolean): WorkerView {
  const cards: CardView[] = [];
  for (let c = 0; c < CARDS; c++) cards.push(card(c, mig ? { mig_mode: 'enabled' } : {}));
  if (mig) for (let c = 0; c < CARDS; c++) for (let gi = 1; gi <= SLICES; gi++) cards.push(slice(c, gi));
  return {
    worker_id: `bench-w${String(w).padStart(2, '0')}`,
    online: true,
    draining: false,
    sampled_at: NOW,
    sampler_error: null,
    isolation: 'bwrap',
    container_engine: null,
    cards,
  };
}

function tasks(mixed: boolean): QueuedTaskView[] {
  return Array.from({ length: TASKS }, (_, i) => {
    const kind = mixed ? i % 3 : 0;
    const cards: QueuedTaskView['cards'] =
      kind === 0
        ? { count: 1 }
        : kind === 1
          ? { count: 1, mig_profile: '1g.10gb' }
          : { count: 1, min_memory_mib: 9000, allow_mig: true };
    return { task_id: `t${i}`, owner: `o${i % 16}`, priority: 0, approved_at: i, cards };
  });
}

function passes(snapshot: SchedulingSnapshot): { ms: number[]; grants: number } {
  const ms: number[] = [];
  let grants = 0;
  for (let i = 0; i < PASSES; i++) {
    // A fresh cache each pass: the worst case, every requirement read again.
    const cache: RequirementCache = new WeakMap();
    const started = performance.now();
    grants = decide(snapshot, NOW, cache).grants.length;
    ms.push(performance.now() - started);
  }
  return { ms, grants };
}

async function runSchedulingMig(): Promise<OpResult[]> {
  const base: SchedulingSnapshot = {
    workers: Array.from({ length: WORKERS }, (_, w) => worker(w, false)),
    tasks: tasks(false),
    running_cards_by_owner: {},
    config: CONFIG,
  };
  const mixed: SchedulingSnapshot = {
    ...base,
    workers: Array.from({ length: WORKERS }, (_, w) => worker(w, w % 2 === 1)),
    tasks: tasks(true),
  };
  const today = passes(base);
  const withSlices = passes(mixed);
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
  const ratio = median(withSlices.ms) / median(today.ms);
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / 1000;
  return [
    summarise(
      'scheduling-mig',
      `decide, ${WORKERS} × ${CARDS} whole cards, ${TASKS} queued`,
      today.ms,
      0,
      sum(today.ms),
      `${today.grants} grants a pass; today's pool`,
    ),
    summarise(
      'scheduling-mig',
      `decide, half the workers' cards in MIG mode × ${SLICES} slices, ${TASKS} queued`,
      withSlices.ms,
      ratio > 1.5 ? 1 : 0,
      sum(withSlices.ms),
      `${withSlices.grants} grants a pass; p50 ${ratio.toFixed(2)}× today's (bound 1.5×)`,
    ),
  ];
}

/** The mixed whole-card and MIG-slice scheduling pass of `npm run bench`. */
export const schedulingMigSection: BenchSection = {
  name: 'scheduling-mig',
  description:
    'decide over 64 workers, half with 8 cards × 7 MIG slices, 10,000 queued, vs 64 × 8 whole cards',
  run: runSchedulingMig,
};
