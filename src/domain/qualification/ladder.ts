/**
 * Which rungs a qualification run can test (docs/qualification.md). Pure: the broker passes
 * in what it knows of the worker and gets the ladder back as data.
 *
 * - A local worker: a count runs when the worker has that many usable cards and policy allows it.
 * - A Slurm pool worker (docs/decisions/0017-slurm-qualification.md): the in-node ladder is capped by
 *   the largest node's GPU count (a single-node task needs one node with `count` GPUs: the default
 *   ladder simply stops there, while a count the operator asked for explicitly is skipped, which makes
 *   the verdict INCONCLUSIVE), and, when the
 *   partition has two nodes or more, one extra **span** rung `{cards: 2k, per_node: k}` crosses two
 *   nodes, with k the largest requested count that two nodes can each hold.
 * - MIG (docs/decisions/0046-mig-slices-as-cards.md): a card in MIG mode is never tested whole. The
 *   single-card rung also runs on a slice, once per distinct profile on the worker (GEMM only: CUDA
 *   shows a process one MIG device and all_reduce is not offered across MIG instances), and a
 *   multi-card rung that only the cards in MIG mode could fill is skipped, saying so.
 */

import { cardKey } from '../../contracts/sample.js';

/** A count the run could not test, and why. */
export interface SkippedRung {
  cards: number;
  reason: string;
}

/** The two-node rung of a Slurm pool: `cards` GPUs as `per_node` on each of two nodes. */
export interface SpanRung {
  cards: number;
  per_node: number;
}

/** A MIG slice the single-card rung may run on (usable: neither it nor its card cordoned or quarantined). */
export interface SliceCandidate {
  index: number;
  /** The compute instance's profile (`1g.10gb`). */
  profile: string;
  /** Its compute slices (1..7), the size the slice rungs are ordered by. */
  compute_slices: number;
  /** Whether its latest sample says healthy: a slice with an unreadable minor is never granted. */
  healthy: boolean;
}

/** A single-card rung on one MIG slice: GEMM only, the spec asks for `cards.mig_profile`. */
export interface SliceRung {
  /** The slice the run reserves for the rung (the lowest usable one of its profile, healthy first). */
  index: number;
  profile: string;
}

/** What the planner needs to know of the worker. */
export interface LadderInput {
  worker_id: string;
  /** Requested counts, ascending and distinct. */
  requested: readonly number[];
  /** Whether the operator gave the counts (false: the default ladder, which a pool caps at its largest node). */
  explicit: boolean;
  /** Whole cards not cordoned by an operator, not quarantined and not in MIG mode. */
  usable: number;
  /** All whole cards, cordoned, quarantined or in MIG mode included (for the reason text). */
  total: number;
  cordoned: number;
  quarantined: number;
  /** policy.max_cards. */
  max_cards: number;
  /**
   * policy.allow_network: the span rung's ranks meet over the network (`network: "host"`; each rank's
   * sandbox has only loopback otherwise), so without it there is no span rung.
   */
  network_allowed: boolean;
  /** A Slurm worker's nodes with their GPU counts; null for a local worker. */
  pool: ReadonlyArray<{ name: string; gpus: number }> | null;
  /** Usable whole cards in MIG mode (indexes, ascending): never tested whole, their slices are. */
  mig_mode_cards?: readonly number[];
  /** Usable MIG slices of the worker. */
  slices?: readonly SliceCandidate[];
  /**
   * Why no slice rung may run here (policy.mig `forbid`, a Slurm pool), as the end of a sentence an
   * operator can act on; null or absent: slices may be tested.
   */
  mig_refused?: string | null;
}

/**
 * The plan: the in-node counts to run (ascending) on whole cards, the single-card rungs on MIG slices
 * (smallest first), the span rung (or null), what was skipped.
 */
export interface LadderPlan {
  /** The counts the run asked for (the default ladder capped on a pool). */
  requested: number[];
  ladder: number[];
  slices: SliceRung[];
  span: SpanRung | null;
  skipped: SkippedRung[];
}

/** Why a count needs whole cards that the worker's cards in MIG mode cannot stand in for. */
const NO_ALLREDUCE_ON_MIG = 'all_reduce is not offered across MIG instances';

/**
 * The single-card rungs on slices: one per distinct profile (each profile is its own partition of a
 * card, and a spec names a profile), on its lowest healthy usable slice, smallest profile first.
 */
function sliceRungs(slices: readonly SliceCandidate[]): SliceRung[] {
  const best = new Map<string, SliceCandidate>();
  for (const s of slices) {
    const held = best.get(s.profile);
    if (
      held === undefined ||
      (s.healthy && !held.healthy) ||
      (s.healthy === held.healthy && s.index < held.index)
    )
      best.set(s.profile, s);
  }
  return [...best.values()]
    .sort(
      (a, b) =>
        a.compute_slices - b.compute_slices || (a.profile < b.profile ? -1 : a.profile > b.profile ? 1 : 0),
    )
    .map((s) => ({ index: s.index, profile: s.profile }));
}

/** The whole card a slice index belongs to. */
function parentOf(index: number): number {
  const key = cardKey(index);
  return key?.kind === 'mig' ? key.parent : index;
}

/** `0, 1` → the operator's command that takes those cards out of MIG mode (never run by the broker). */
function migOffHint(cards: readonly number[]): string {
  return `nvidia-smi -i ${cards.join(',')} -mig 0 while the worker is drained`;
}

/** The slice rungs of a count-1 request, or why there are none (skip null: none needed or all planned). */
function planSlices(input: LadderInput): { rungs: SliceRung[]; skip: SkippedRung | null } {
  const migCards = input.mig_mode_cards ?? [];
  const slices = input.slices ?? [];
  if (migCards.length === 0 && slices.length === 0) return { rungs: [], skip: null };
  const parents = migCards.length > 0 ? migCards : [...new Set(slices.map((s) => parentOf(s.index)))];
  const cards = `card(s) ${parents.join(', ')} in MIG mode`;
  const refused = input.mig_refused ?? null;
  if (refused !== null)
    return { rungs: [], skip: { cards: 1, reason: `${cards} cannot be tested: ${refused}` } };
  if (slices.length === 0)
    return {
      rungs: [],
      skip: {
        cards: 1,
        reason: `${cards} have no usable slice to test (create instances with nvidia-smi mig, or cordon those cards)`,
      },
    };
  return { rungs: sliceRungs(slices), skip: null };
}

/** Plans the ladder of one run. */
export function planLadder(input: LadderInput): LadderPlan {
  const { usable, max_cards: maxCards, pool } = input;
  const largestNode = pool === null ? Number.POSITIVE_INFINITY : Math.max(0, ...pool.map((n) => n.gpus));
  const capped = input.explicit ? [] : input.requested.filter((n) => n <= largestNode);
  const requested = capped.length > 0 ? capped : [...input.requested];
  const skipped: SkippedRung[] = [];
  const ladder: number[] = [];
  const migCards = input.mig_mode_cards ?? [];
  const slice = requested.includes(1) && maxCards >= 1 ? planSlices(input) : { rungs: [], skip: null };
  if (slice.skip !== null) skipped.push(slice.skip);
  // Why a count cannot run on whole cards; '' when the slices stand for it (count 1 only); null: it runs.
  const wholeShortfall = (n: number): string | null => {
    if (n <= usable) return null;
    if (n === 1 && (slice.rungs.length > 0 || slice.skip !== null)) return '';
    const counts = `${input.total} in all, ${input.cordoned} cordoned, ${input.quarantined} quarantined`;
    if (migCards.length === 0) return `worker ${input.worker_id} has ${usable} usable card(s) (${counts})`;
    return (
      `${NO_ALLREDUCE_ON_MIG}: worker ${input.worker_id} has ${usable} usable whole card(s) (${counts}, ` +
      `${migCards.length} in MIG mode); the slices of card(s) ${migCards.join(', ')} get only the single-card ` +
      `GEMM rung (to test ${n} cards, take cards out of MIG mode: ${migOffHint(migCards)})`
    );
  };
  for (const n of requested) {
    const shortfall = wholeShortfall(n);
    if (n > maxCards) skipped.push({ cards: n, reason: `policy allows at most ${maxCards} cards per task` });
    else if (shortfall !== null) {
      if (shortfall !== '') skipped.push({ cards: n, reason: shortfall });
    } else if (n > largestNode)
      skipped.push({
        cards: n,
        reason: `no usable node of the pool has ${n} GPUs (the largest has ${largestNode})`,
      });
    else ladder.push(n);
  }
  const slices = slice.rungs;
  if (pool === null || pool.length < 2) return { requested, ladder, slices, span: null, skipped };
  if (!input.network_allowed) {
    skipped.push({
      cards: 2 * (requested[0] ?? 1),
      reason:
        'the two-node rung needs network "host" (its ranks meet over the network, and a sandboxed rank has only loopback); policy.allow_network is false',
    });
    return { requested, ladder, slices, span: null, skipped };
  }
  // Two nodes must each hold k: k is bounded by the second-largest node.
  const secondLargest = [...pool.map((n) => n.gpus)].sort((a, b) => b - a)[1] ?? 0;
  const k = [...requested].reverse().find((r) => r <= secondLargest && 2 * r <= maxCards && 2 * r <= usable);
  if (k === undefined) {
    const smallest = requested[0] ?? 1;
    skipped.push({
      cards: 2 * smallest,
      reason: `no two-node rung fits: two nodes with ${smallest} GPU(s) each, ${2 * smallest} usable cards and policy max_cards ${maxCards} are needed`,
    });
    return { requested, ladder, slices, span: null, skipped };
  }
  return { requested, ladder, slices, span: { cards: 2 * k, per_node: k }, skipped };
}

/**
 * The nodes of a pool a rung can land on: those whose GPUs the latest sample shows healthy. A pool's
 * slots are numbered over the nodes in name order (ADR 0013), so node i owns the next `gpus` slots; a
 * node with a failed slot (down, drained, not responding) is left out, so that no rung is planned
 * that only it could hold. Without a sample every node is kept (the rungs then show what is wrong).
 */
export function usableNodes<N extends { name: string; gpus: number }>(
  nodes: readonly N[],
  cards: ReadonlyArray<{ index: number; health: string }>,
): N[] {
  if (cards.length === 0) return [...nodes];
  const failed = new Set(cards.filter((c) => c.health === 'failed').map((c) => c.index));
  const known = new Set(cards.map((c) => c.index));
  let offset = 0;
  const kept: N[] = [];
  for (const n of nodes) {
    const slots = Array.from({ length: n.gpus }, (_, i) => offset + i);
    offset += n.gpus;
    if (slots.every((i) => known.has(i) && !failed.has(i))) kept.push(n);
  }
  return kept;
}

/** A rung's short name: `4` within one node or host, `8=2x4` across two nodes, `1-mig-1g.10gb` on a slice. */
export function rungLabel(cards: number, perNode: number | null, migProfile: string | null = null): string {
  if (migProfile !== null) return `${cards}-mig-${migProfile}`;
  return perNode === null ? String(cards) : `${cards}=${cards / perNode}x${perNode}`;
}
