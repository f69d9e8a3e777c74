import type {
  AccountView,
  CardView,
  ModelQuotaView,
  SchedulingConfig,
  WorkerView,
} from '../../src/domain/scheduling/types.js';

/**
 * Scheduler snapshots for the pure scheduling tests: an idle simulated card, a worker of such cards
 * (some leased), and the settings most tests decide with.
 */

/** The settings a pass decides with in these tests: 2 s samples, reservations after 10 min, no caps. */
export const SCHEDULING_CONFIG: SchedulingConfig = {
  sample_interval_ms: 2000,
  vram_threshold_pct: 2,
  reservation_after_seconds: 600,
  max_concurrent_cards_per_owner: null,
  require_isolation: true,
};

/** An idle, healthy simulated card (leased or not by our records). */
export function simCardView(index: number, leased: boolean): CardView {
  return {
    index,
    model: 'SIM-GPU',
    memory_used_mib: 0,
    memory_total_mib: 81559,
    health: 'ok',
    health_reasons: [],
    processes: [],
    simulated: true,
    cordoned: false,
    leased,
    quarantined: false,
    broker_pids: [],
  };
}

/** An online, sandboxed worker of `count` simulated cards, those in `leased` held by leases. */
export function simWorkerView(id: string, leased: readonly number[] = [], count = 8): WorkerView {
  return {
    worker_id: id,
    online: true,
    draining: false,
    sampled_at: 1_000,
    sampler_error: null,
    isolation: 'bwrap',
    container_engine: null,
    cards: Array.from({ length: count }, (_, i) => simCardView(i, leased.includes(i))),
  };
}

/** An account under root with half the shares, no usage, no cards held and no quotas, `over` last. */
export function accountView(over: Partial<AccountView> = {}): AccountView {
  return {
    share: 0.5,
    usage: 0,
    running_cards: 0,
    parent: 'root',
    nominal_cards: null,
    borrowing_limit: null,
    budget: null,
    ...over,
  };
}

/** An account's quota for one card model (ADR 0048) with no limits set, `over` last. */
export function modelQuotaView(model: string, over: Partial<ModelQuotaView> = {}): ModelQuotaView {
  return {
    model,
    words: ` ${model.toLowerCase()} `,
    nominal_cards: null,
    borrowing_limit: null,
    budget: null,
    ...over,
  };
}
