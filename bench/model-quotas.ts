import { decide } from '../src/domain/scheduling/decide.js';
import type {
  AccountView,
  QueuedTaskView,
  SchedulingSnapshot,
  WorkerView,
} from '../src/domain/scheduling/types.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';
import { benchCard, benchWorker } from './views.js';

/**
 * Quotas per card model in the pass (ADR 0048; `npm run bench -- --only model-quotas`): decide over
 * 64 workers × 8 cards (32 of H100s, 32 of A100s) and 10,000 queued 1/2/4/8-card tasks across 50
 * accounts, without model quotas and with an H100 quota on every account (nominal 2 + borrowing 2, each
 * holding 2 H100s already, so most tasks of the pass find their H100 quota full and are narrowed to the
 * A100s), alternated in one run: what the per-task quota walk and the narrowed shapes cost.
 */

const NOW = 10_000_000;
const H100 = 'NVIDIA H100 80GB HBM3';
const A100 = 'NVIDIA A100-SXM4-80GB';

function worker(i: number): WorkerView {
  const model = i < 32 ? H100 : A100;
  const cards = Array.from({ length: 8 }, (_, c) => benchCard(c, { model }));
  return benchWorker(`w${String(i).padStart(2, '0')}`, cards, NOW - 500);
}

function snapshot(modelQuotas: boolean): SchedulingSnapshot {
  const tasks: QueuedTaskView[] = Array.from({ length: 10_000 }, (_, i) => ({
    task_id: `t${String(i).padStart(5, '0')}`,
    owner: `o${i % 50}`,
    account: `acct${i % 50}`,
    priority: 0,
    approved_at: NOW - i,
    cards: { count: 2 ** (i % 4) },
  }));
  const accounts: Record<string, AccountView> = {};
  let weights = 0;
  for (let i = 0; i < 50; i++) weights += 1 + (i % 5);
  for (let i = 0; i < 50; i++)
    accounts[`acct${i}`] = {
      share: (1 + (i % 5)) / weights,
      usage: 3600 * (i % 7),
      running_cards: 0,
      parent: 'root',
      ...(modelQuotas
        ? {
            model_quotas: [
              { model: 'H100', words: ' h100 ', nominal_cards: 2, borrowing_limit: 2, budget: null },
            ],
            running_by_model: { [H100]: 2 },
          }
        : {}),
    };
  accounts['root'] = { share: 1, usage: 0, running_cards: 0, parent: null };
  const total_usage = Object.values(accounts).reduce((n, a) => n + a.usage, 0);
  return {
    workers: Array.from({ length: 64 }, (_, i) => worker(i)),
    tasks,
    running_cards_by_owner: {},
    fair_share: { accounts, total_cards: 64 * 8, total_usage },
    config: {
      sample_interval_ms: 2000,
      vram_threshold_pct: 2,
      reservation_after_seconds: 600,
      max_concurrent_cards_per_owner: 64,
      require_isolation: true,
    },
  };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function decideRows(): OpResult[] {
  const plain = snapshot(false);
  const quotas = snapshot(true);
  decide(plain, NOW);
  decide(quotas, NOW);
  const started = performance.now();
  const base: number[] = [];
  const ms: number[] = [];
  for (let i = 0; i < 9; i++) {
    let t = performance.now();
    decide(plain, NOW);
    base.push(performance.now() - t);
    t = performance.now();
    decide(quotas, NOW);
    ms.push(performance.now() - t);
  }
  const seconds = (performance.now() - started) / 1000;
  const granted = decide(quotas, NOW).grants.length;
  return [
    summarise(
      'model-quotas',
      'decide 64×8 (H100 + A100), 10,000 queued 1/2/4/8, 50 accounts, no model quota',
      base,
      0,
      seconds,
      `median ${median(base).toFixed(1)} ms`,
    ),
    summarise(
      'model-quotas',
      'the same, every account an H100 quota it has filled',
      ms,
      0,
      seconds,
      `median ${median(ms).toFixed(1)} ms, ×${(median(ms) / median(base)).toFixed(2)} (alternated); ${granted} grants`,
    ),
  ];
}

/** See the module note. */
export const modelQuotasSection: BenchSection = {
  name: 'model-quotas',
  description:
    'decide with quotas per card model: 64 × 8 cards of two models, 10,000 queued tasks, 50 accounts, without and with an H100 quota on each',
  async run() {
    return decideRows();
  },
};
