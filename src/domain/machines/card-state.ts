import type { CardSample } from '../../contracts/sample.js';

/**
 * Card state (docs/state-machines.md), derived on every read from the latest sample and the broker's own
 * records, never stored: a stored state would go stale the moment a sample or a lease changed.
 *
 * Precedence, first match wins. Facts from our own records come first because they hold whatever the
 * hardware says and must stay visible when the worker goes silent (a leased card on an offline worker
 * is still ours, and must not look merely "unknown"); then whether we can trust the sample at all;
 * then what a trustworthy sample shows, strongest fault first.
 *
 *  1. QUARANTINED  a lease on it was never confirmed clean: never free on a guess
 *  2. LEASED       a live lease of ours holds it
 *  3. CORDONED     an operator took it out of the pool, or the card is in MIG mode (only its slices are
 *                  leased, ADR 0046)
 *     (BUSY_FOREIGN here when the worker says its own unfinished execution holds the card and no lease
 *     of ours does: the worker's word about its own executions outranks our older records)
 *  4. UNKNOWN      worker offline, sampler failing, no sample, or the sample is older than 3 intervals
 *  5. UNHEALTHY    health `failed` or `degraded`
 *  6. BUSY_FOREIGN VRAM used over the threshold, or a compute process the broker did not start
 *  7. UNKNOWN      a real card whose memory use or size was not measured (we cannot prove it is idle);
 *                  ranked below 5 and 6 because a fault we did see says more than a reading we lack
 *  8. AVAILABLE
 *
 * `reasons` lists every fact found, in that order, not only the winning one, so that e.g. a leased card
 * whose worker went offline, or which shows a stranger's process, says so. Observations from a sample
 * that is not fresh are not reported: they may no longer be true.
 */
export type CardState =
  /** Fresh sample, healthy, idle, no lease, cordon or quarantine: the scheduler may grant it. */
  | 'AVAILABLE'
  /** A live lease of the broker holds the card. */
  | 'LEASED'
  /** Someone else is using it: VRAM over the threshold or a compute process the broker did not start. */
  | 'BUSY_FOREIGN'
  /** The sampler reports health `failed` or `degraded` (ECC, XID, health flags). */
  | 'UNHEALTHY'
  /** An operator cordoned it; nothing new lands on it until uncordoned. */
  | 'CORDONED'
  /** A lease's cleanup was never confirmed; only a cleanup receipt or an operator reconcile frees it. */
  | 'QUARANTINED'
  /** We cannot tell: no fresh sample, worker offline, sampler failing, or memory not measured. */
  | 'UNKNOWN';

/** Every card state, in precedence order (see {@link CardState}). */
export const CARD_STATES: readonly CardState[] = [
  'QUARANTINED',
  'LEASED',
  'CORDONED',
  'UNKNOWN',
  'UNHEALTHY',
  'BUSY_FOREIGN',
  'AVAILABLE',
];

/** Why a card in MIG mode is never granted whole (its slices are: docs/decisions/0046-mig-slices-as-cards.md). */
export const MIG_MODE_REASON = 'in MIG mode: its slices are leased, never the whole card';

/** Default VRAM-used threshold, in percent of the card's total memory (docs/state-machines.md). */
export const DEFAULT_VRAM_THRESHOLD_PCT = 2;

/** A sample older than this many sample intervals is not fresh (docs/state-machines.md). */
export const STALE_AFTER_SAMPLE_INTERVALS = 3;

/** The sample fields a card's state depends on. */
export type CardReading = Pick<
  CardSample,
  | 'memory_used_mib'
  | 'memory_total_mib'
  | 'memory_used_pct'
  | 'health'
  | 'health_reasons'
  | 'processes'
  | 'simulated'
  | 'mig_mode'
>;

/** What the broker's own records say about a card. */
export interface CardRecords {
  /** An operator cordoned the card. */
  cordoned: boolean;
  /** A live (ACTIVE or RELEASING) lease holds the card. */
  leased: boolean;
  /** A lease on the card is QUARANTINED. */
  quarantined: boolean;
  /** Pids of processes the broker itself started on this card (an active lease's execution). */
  broker_pids: readonly number[];
  /**
   * The worker says one of its unfinished executions holds the card, and no live lease of ours does
   * (a restored master, or a reconcile while the task still ran): busy until the worker lets it go.
   */
  held_by_worker?: boolean;
}

/** What the master knows about a worker's sampling. */
export interface WorkerSampling {
  /** The worker has a live session (docs/worker-protocol.md: offline after 15 s without a message). */
  online: boolean;
  /** When the worker's latest sample was taken, in ms on the master's clock; null if it never sampled. */
  sampled_at: number | null;
  /** The sampler's error from the latest sample; its cards are UNKNOWN while it is set. */
  sampler_error: string | null;
}

/** Everything {@link deriveCardState} reads. */
export interface CardStateInput {
  /** The card: its latest reading and our records about it. */
  card: CardReading & CardRecords;
  /** The card's worker. */
  worker: WorkerSampling;
}

/** Thresholds the derivation uses; the master's config supplies them. */
export interface CardStateConfig {
  /** How often workers sample, in ms; a sample older than 3 intervals is stale. */
  sample_interval_ms: number;
  /** VRAM used over this percent of total makes a card BUSY_FOREIGN; default 2. */
  vram_threshold_pct?: number;
}

/** A derived card state and every fact behind it (empty when AVAILABLE). */
export interface CardStateResult {
  /** The winning state under the precedence of {@link CardState}. */
  state: CardState;
  /** Human-readable facts, in precedence order; the first explains `state`. */
  reasons: string[];
}

/**
 * Derives a card's state at `now` (ms). Pure: the same input always gives the same result.
 */
export function deriveCardState(
  input: CardStateInput,
  now: number,
  config: CardStateConfig,
): CardStateResult {
  const { card, worker } = input;
  // Every fact found, in precedence order; the first one names the state.
  const facts: Array<{ state: CardState; reason: string }> = [];
  const found = (state: CardState, reason: string): void => {
    facts.push({ state, reason });
  };

  // 1-3. Our own records: they hold whatever the card reports.
  if (card.quarantined) found('QUARANTINED', 'cleanup of a lease on this card was never confirmed');
  if (card.leased) found('LEASED', 'leased by the broker');
  if (card.cordoned) found('CORDONED', 'cordoned by an operator');
  if (card.held_by_worker && !card.leased)
    found('BUSY_FOREIGN', 'an execution the worker still runs holds it, without a live lease of ours');
  // A card in MIG mode is split into slices, each a card of its own (ADR 0046): the card itself is
  // out of the pool exactly as a cordoned one, whatever its slices are doing.
  if (card.mig_mode === 'enabled') found('CORDONED', MIG_MODE_REASON);

  // 4. Can the sample be trusted at all? Stop here if not: its observations may be stale.
  const staleReason = freshnessProblem(worker, now, config.sample_interval_ms);
  if (staleReason !== null) {
    found('UNKNOWN', staleReason);
    return result(facts);
  }

  // 5. Health. `unknown` health is not a fault: many cards (no ECC) never report it.
  if (card.health === 'failed' || card.health === 'degraded') {
    const detail = card.health_reasons.length > 0 ? `: ${card.health_reasons.join(', ')}` : '';
    found('UNHEALTHY', `health ${card.health}${detail}`);
  }

  // 6. Foreign use. Processes the broker started are ours, whatever memory they hold.
  const foreign = card.processes.filter((p) => !card.broker_pids.includes(p.pid));
  if (foreign.length > 0) {
    const names = foreign.map((p) => `${p.name} (pid ${p.pid})`).join(', ');
    found('BUSY_FOREIGN', `compute process not started by the broker: ${names}`);
  }
  const memory = memoryUse(card);
  const threshold = config.vram_threshold_pct ?? DEFAULT_VRAM_THRESHOLD_PCT;
  if (memory !== null && memory.pct > threshold) {
    const amount = memory.used !== null ? `${memory.used} of ${memory.total} MiB used` : 'used';
    found('BUSY_FOREIGN', `VRAM ${amount} (${round1(memory.pct)} % > ${threshold} % threshold)`);
  }

  // 7. A real card we cannot prove idle is not free; simulated cards hold nothing to collide with.
  if (memory === null) found('UNKNOWN', 'memory use not measured, so the card cannot be shown to be idle');

  return result(facts);
}

/** True when the card may be granted to a task now: its derived state is AVAILABLE. */
export function isEligible(input: CardStateInput, now: number, config: CardStateConfig): boolean {
  return deriveCardState(input, now, config).state === 'AVAILABLE';
}

function result(facts: ReadonlyArray<{ state: CardState; reason: string }>): CardStateResult {
  return { state: facts[0]?.state ?? 'AVAILABLE', reasons: facts.map((f) => f.reason) };
}

/** Why the worker's latest sample cannot be trusted, or null when it is fresh. */
function freshnessProblem(worker: WorkerSampling, now: number, intervalMs: number): string | null {
  if (!worker.online) return 'worker offline';
  if (worker.sampler_error !== null) return `sampler failing: ${worker.sampler_error}`;
  if (worker.sampled_at === null) return 'no sample yet';
  const age = now - worker.sampled_at;
  // A sample from the future (clock skew) counts as fresh: it is the newest we have.
  if (age > STALE_AFTER_SAMPLE_INTERVALS * intervalMs) {
    return `last sample ${Math.round(age / 1000)} s old (stale after ${STALE_AFTER_SAMPLE_INTERVALS} sample intervals)`;
  }
  return null;
}

/**
 * Memory used (MiB when known) and percent, or null when a real card did not report it. A tool that
 * reports only a percentage (hy-smi's table) still proves a card idle or busy.
 */
function memoryUse(card: CardReading): { used: number | null; total: number | null; pct: number } | null {
  const used = card.memory_used_mib;
  const total = card.memory_total_mib;
  if (used !== null && total !== null && total > 0) return { used, total, pct: (used / total) * 100 };
  const pct = card.memory_used_pct ?? null;
  if (pct !== null) return { used: null, total, pct };
  return card.simulated ? { used: used ?? 0, total: total ?? 0, pct: 0 } : null;
}

function round1(n: number): number {
  return Math.round(n * 10) / 10;
}
