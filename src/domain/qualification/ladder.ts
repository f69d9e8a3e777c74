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
 */

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

/** What the planner needs to know of the worker. */
export interface LadderInput {
  worker_id: string;
  /** Requested counts, ascending and distinct. */
  requested: readonly number[];
  /** Whether the operator gave the counts (false: the default ladder, which a pool caps at its largest node). */
  explicit: boolean;
  /** Card indexes not cordoned by an operator and not quarantined. */
  usable: number;
  /** All cards, cordoned or quarantined included (for the reason text). */
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
}

/** The plan: the in-node counts to run (ascending), the span rung (or null), what was skipped. */
export interface LadderPlan {
  /** The counts the run asked for (the default ladder capped on a pool). */
  requested: number[];
  ladder: number[];
  span: SpanRung | null;
  skipped: SkippedRung[];
}

/** Plans the ladder of one run. */
export function planLadder(input: LadderInput): LadderPlan {
  const { usable, max_cards: maxCards, pool } = input;
  const largestNode = pool === null ? Number.POSITIVE_INFINITY : Math.max(0, ...pool.map((n) => n.gpus));
  const capped = input.explicit ? [] : input.requested.filter((n) => n <= largestNode);
  const requested = capped.length > 0 ? capped : [...input.requested];
  const skipped: SkippedRung[] = [];
  const ladder: number[] = [];
  for (const n of requested) {
    if (n > maxCards) skipped.push({ cards: n, reason: `policy allows at most ${maxCards} cards per task` });
    else if (n > usable)
      skipped.push({
        cards: n,
        reason: `worker ${input.worker_id} has ${usable} usable card(s) (${input.total} in all, ${input.cordoned} cordoned, ${input.quarantined} quarantined)`,
      });
    else if (n > largestNode)
      skipped.push({
        cards: n,
        reason: `no usable node of the pool has ${n} GPUs (the largest has ${largestNode})`,
      });
    else ladder.push(n);
  }
  if (pool === null || pool.length < 2) return { requested, ladder, span: null, skipped };
  if (!input.network_allowed) {
    skipped.push({
      cards: 2 * (requested[0] ?? 1),
      reason:
        'the two-node rung needs network "host" (its ranks meet over the network, and a sandboxed rank has only loopback); policy.allow_network is false',
    });
    return { requested, ladder, span: null, skipped };
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
    return { requested, ladder, span: null, skipped };
  }
  return { requested, ladder, span: { cards: 2 * k, per_node: k }, skipped };
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

/** A rung's short name: `4` within one node or host, `8=2x4` across two nodes. */
export function rungLabel(cards: number, perNode: number | null): string {
  return perNode === null ? String(cards) : `${cards}=${cards / perNode}x${perNode}`;
}
