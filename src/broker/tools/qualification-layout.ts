import { cardKey, cardLabel, MIG_INDEX_BASE } from '../../contracts/sample.js';
import type { SliceCandidate } from '../../domain/qualification/ladder.js';
import type { QualificationRunRecord } from '../../store/qualification-repo.js';
import type { BrokerDeps } from '../deps.js';

/**
 * A worker's cards as a qualification run sees them (docs/decisions/0046-mig-slices-as-cards.md): whole
 * cards it may test whole, whole cards in MIG mode (never tested whole), and the MIG slices the
 * single-card GEMM rungs may run on. Read from the worker's latest sample, or from the card identities
 * its row keeps when no sample is held.
 */

/** What the layout reads of a card: a live sample's card or the worker row's identity. */
interface LayoutCard {
  index: number;
  mig_mode?: string | null | undefined;
  mig?: { profile: string; compute_slices: number } | undefined;
  health?: string | undefined;
}

/** The worker's cards split for the planner; `blocked` says a card is cordoned or quarantined. */
export interface WorkerLayout {
  /** Usable whole cards not in MIG mode, ascending. */
  whole: number[];
  /** Every whole card (for the reason text). */
  total: number;
  /** Usable whole cards in MIG mode, ascending. */
  migMode: number[];
  /** Usable slices: neither the slice nor its card blocked. */
  slices: SliceCandidate[];
}

/** The whole card a slice belongs to (the index itself for a whole card). */
function parentOf(index: number): number {
  const key = cardKey(index);
  return key?.kind === 'mig' ? key.parent : index;
}

/**
 * Splits a worker's cards. A whole card is in MIG mode when its sample says so or when a slice of it is
 * reported (the row's identities keep no mode, but a card with slices is split).
 */
export function workerLayout(
  cards: readonly LayoutCard[],
  blocked: (index: number) => boolean,
): WorkerLayout {
  const split = new Set(cards.filter((c) => c.index >= MIG_INDEX_BASE).map((c) => parentOf(c.index)));
  const whole = cards.filter((c) => c.index < MIG_INDEX_BASE).sort((a, b) => a.index - b.index);
  const inMig = (c: LayoutCard) => c.mig_mode === 'enabled' || split.has(c.index);
  const slices = cards
    .filter((c) => c.index >= MIG_INDEX_BASE && !blocked(c.index) && !blocked(parentOf(c.index)))
    .flatMap((c) =>
      c.mig === undefined
        ? []
        : [
            {
              index: c.index,
              profile: c.mig.profile,
              compute_slices: c.mig.compute_slices,
              healthy: c.health === undefined || c.health === 'ok',
            },
          ],
    );
  return {
    whole: whole.filter((c) => !blocked(c.index) && !inMig(c)).map((c) => c.index),
    total: whole.length,
    migMode: whole.filter((c) => !blocked(c.index) && inMig(c)).map((c) => c.index),
    slices,
  };
}

/** A slice rung of a run, as the runner drives it and the run view shows it. */
export interface RunSliceRung {
  index: number;
  /** `0:mig:2/0`. */
  card: string;
  /** The slice's profile as the master knows it now; null when its worker no longer reports it. */
  profile: string | null;
}

/**
 * The slice rungs of a run: its reserved slices (a run reserves exactly one slice per slice rung), smallest
 * first, with the profile the master knows for each (the worker's latest sample, else its row).
 */
export function runSliceRungs(deps: BrokerDeps, run: QualificationRunRecord): RunSliceRung[] {
  const reserved = run.reserved_cards.filter((i) => i >= MIG_INDEX_BASE);
  if (reserved.length === 0) return [];
  const known = new Map<number, { profile: string; compute_slices: number }>();
  for (const c of deps.store.workers.get(run.worker_id)?.cards ?? []) if (c.mig) known.set(c.index, c.mig);
  for (const c of deps.cluster.fleet.get(run.worker_id).cards) if (c.mig) known.set(c.index, c.mig);
  const size = (i: number) => known.get(i)?.compute_slices ?? 8;
  return [...reserved]
    .sort((a, b) => size(a) - size(b) || a - b)
    .map((index) => ({ index, card: cardLabel(index), profile: known.get(index)?.profile ?? null }));
}
