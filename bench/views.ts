import type { CardView, WorkerView } from '../src/domain/scheduling/types.js';

/**
 * The scheduler views the pure benches build their snapshots from (test-bounds, fairness, model-quotas,
 * scheduling-mig): an idle, healthy H100 by default, and an online, sandboxed worker of such cards.
 */

/** An idle, healthy card (an H100, not simulated, not leased), `over` last. */
export function benchCard(index: number, over: Partial<CardView> = {}): CardView {
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

/** An online, sandboxed worker holding `cards`, sampled at `sampledAt`. */
export function benchWorker(worker_id: string, cards: CardView[], sampledAt: number): WorkerView {
  return {
    worker_id,
    online: true,
    draining: false,
    sampled_at: sampledAt,
    sampler_error: null,
    isolation: 'bwrap',
    container_engine: null,
    cards,
  };
}
