import { type CardSample, cardLabel } from '../../src/contracts/sample.js';
import type { ExecutionPlan, LeasedCard } from '../../src/contracts/worker-protocol.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import type { ExecutionSummary } from '../store/local-store.js';

/**
 * Card checks of the worker daemon: before running (do the leased cards exist here, with the uuids the master
 * leased? does another of this worker's executions still hold one?), while running (is a leased card
 * gone from the samples: CARD_LOST) and for the cleanup receipt (docs/worker-protocol.md: no process left on the leased cards and
 * memory back under the threshold).
 */

/** VRAM use at or under this percent of the total counts as clean when the plan names no threshold. */
export const DEFAULT_CLEAN_VRAM_PCT = 2;

const NO_CARDS: ReadonlySet<number> = new Set();

/** Whether `found`, a MIG slice, shares its GPU instance with a compute instance another task holds. */
function sharesMemoryWithOthers(
  found: CardSample,
  sampled: readonly CardSample[],
  heldByOthers: ReadonlySet<number>,
): boolean {
  const mig = found.mig;
  if (mig === undefined || mig === null || heldByOthers.size === 0) return false;
  return sampled.some(
    (c) =>
      c.index !== found.index &&
      heldByOthers.has(c.index) &&
      c.mig?.parent_index === mig.parent_index &&
      c.mig.gpu_instance === mig.gpu_instance,
  );
}

/** Why `cards` cannot be run on, given the latest sample; null when they can. */
export function leasedCardsProblem(
  leased: readonly LeasedCard[],
  sampled: readonly CardSample[] | null,
): string | null {
  const seen = new Set<number>();
  for (const card of leased) {
    if (seen.has(card.index)) return `card ${card.index} is listed twice in the plan`;
    seen.add(card.index);
  }
  if (sampled === null)
    return 'this worker has no successful card sample yet, so it cannot check the leased cards';
  const here = sampled.map((c) => c.index).join(', ') || 'none';
  for (const card of leased) {
    const found = sampled.find((c) => c.index === card.index);
    if (found === undefined) return `card ${card.index} does not exist on this worker (cards here: ${here})`;
    if (found.uuid !== card.uuid)
      return `card ${card.index} is ${found.uuid} on this worker, not ${card.uuid} as leased`;
    // A card in MIG mode is leased only as its slices; a slice whose capability nodes are unknown
    // cannot be bound (docs/decisions/0046-mig-slices-as-cards.md).
    if (found.mig_mode === 'enabled')
      return `card ${card.index} is in MIG mode on this worker: only its slices can be leased, never the whole card`;
    if (found.mig && (found.mig.gi_access_minor === null || found.mig.ci_access_minor === null))
      return `MIG slice ${cardLabel(card.index)} has no known capability nodes on this worker, so it cannot be bound`;
  }
  return null;
}

/**
 * Which leased cards a successful sample no longer lists as leased: the index is absent, or another
 * uuid is there (a MIG layout changed under the task, or a card fell off the bus; ADR 0046 §7). Null when
 * every card is there, and for an empty list: a sampler that lists nothing is not trusted to say a card
 * is gone (the master's `leased_card_missing` alert reads samples the same way).
 */
export function goneCardsProblem(
  leased: readonly LeasedCard[],
  sampled: readonly CardSample[] | null,
): string | null {
  if (sampled === null || sampled.length === 0) return null;
  const byIndex = new Map(sampled.map((c) => [c.index, c]));
  const gone = leased.flatMap((card) => {
    const found = byIndex.get(card.index);
    if (found === undefined) return [`${cardLabel(card.index)} (${card.uuid}) is no longer on this worker`];
    if (found.uuid !== card.uuid)
      return [`${cardLabel(card.index)} is now ${found.uuid}, not ${card.uuid} as leased`];
    return [];
  });
  return gone.length === 0 ? null : `leased card gone: ${gone.join('; ')}`;
}

/**
 * Why one sample shows the leased cards in use; null when they are clean. The rule is the master's
 * eligibility rule (card-state.ts): over `thresholdPct` of VRAM is busy; a card that reports only a
 * percentage (hy-smi's table) is judged by it; unmeasured memory is not clean.
 */
export function dirtyCardsProblem(
  leased: readonly LeasedCard[],
  sampled: readonly CardSample[],
  thresholdPct: number = DEFAULT_CLEAN_VRAM_PCT,
  heldByOthers: ReadonlySet<number> = NO_CARDS,
): string | null {
  const problems: string[] = [];
  for (const card of leased) {
    const found = sampled.find((c) => c.index === card.index && c.uuid === card.uuid);
    if (found === undefined) {
      problems.push(`card ${card.index} (${card.uuid}) is missing from the sample`);
      continue;
    }
    if (found.processes.length > 0) {
      const list = found.processes.map((p) => `${p.pid} (${p.name})`).join(', ');
      problems.push(`card ${card.index} still has compute processes: ${list}`);
    }
    // A MIG compute instance reports its GPU instance's memory, which sibling compute instances of the
    // same GPU instance share: while another task holds one of them, the memory in use is not this
    // slice's to judge (ADR 0046 §7), so only the rest of the check applies.
    if (sharesMemoryWithOthers(found, sampled, heldByOthers)) continue;
    const used = found.memory_used_mib;
    const total = found.memory_total_mib;
    const pct =
      used !== null && total !== null && total > 0 ? (used / total) * 100 : (found.memory_used_pct ?? null);
    if (pct === null) {
      problems.push(`card ${card.index} memory use is not measured`);
    } else if (pct > thresholdPct) {
      const amount = used !== null && total !== null ? `${used} MiB of ${total} MiB` : `${pct} % of its VRAM`;
      problems.push(`card ${card.index} still uses ${amount} (over ${thresholdPct} %)`);
    }
  }
  return problems.length === 0 ? null : problems.join('; ');
}

/**
 * The executor's `checkCardsClean` for `leased`: samples again and applies `dirtyCardsProblem`, with
 * `heldByOthers` the card indexes the worker's other running executions hold at that moment.
 * Undefined for simulated cards, which hold no memory and show no processes of their own.
 */
export function cardsCleanCheck(
  sampler: CardSampler,
  leased: readonly LeasedCard[],
  thresholdPct: number = DEFAULT_CLEAN_VRAM_PCT,
  heldByOthers: () => ReadonlySet<number> = () => NO_CARDS,
): (() => Promise<{ clean: boolean; detail?: string }>) | undefined {
  if (sampler.provider === 'sim') return undefined;
  return async () => {
    const problem = dirtyCardsProblem(leased, await sampler.sample(), thresholdPct, heldByOthers());
    return problem === null ? { clean: true } : { clean: false, detail: problem };
  };
}
/**
 * Successive successful samples that must lack a leased card before the worker stops its run: one odd
 * sample never kills a task; two (one sample interval apart, 2 s by default) end it CARD_LOST.
 */
export const CARD_GONE_SAMPLES = 2;

/**
 * An exit that failed while a leased card was gone: CARD_LOST, the cards named first in its detail and
 * the executor's own failure after them. A clean exit stays clean: the task finished before it noticed.
 */
export function cardLostSummary(summary: ExecutionSummary, lost: string | null): ExecutionSummary {
  if (lost === null || summary.failure_reason === null) return summary;
  const own = `the run ended ${summary.failure_reason}`;
  return {
    ...summary,
    failure_reason: 'CARD_LOST',
    detail: [lost, own, summary.detail]
      .filter((d) => d !== undefined)
      .join('; ')
      .slice(0, 4096),
  };
}

/**
 * Why `plan` may not start while `unfinished` executions of this worker run: one of them still holds one
 * of its cards (the master lost track of it, e.g. restored from a backup). Null when the cards are free.
 */
export function heldCardsProblem(
  plan: ExecutionPlan,
  unfinished: ReadonlyArray<{ execution_id: string; lease_epoch: number; plan: ExecutionPlan }>,
): string | null {
  const wanted = new Set(plan.cards.map((c) => c.index));
  for (const e of unfinished) {
    if (e.execution_id === plan.execution_id) continue;
    const card = e.plan.cards.find((c) => wanted.has(c.index));
    if (card !== undefined)
      return `card ${card.index} is still held by execution ${e.execution_id} (lease epoch ${e.lease_epoch}) on this worker`;
  }
  return null;
}
