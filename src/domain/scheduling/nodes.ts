import { type CardState, type CardStateConfig, deriveCardState } from '../machines/card-state.js';
import type { CardView, WorkerView } from './types.js';

/**
 * A Slurm pool's admission facts (docs/decisions/0013-slurm-backend.md, "Per-node admission"). Slurm
 * places a job, not the broker, so a pool is offered by count; but a job only starts where one node
 * (or, for `cards.per_node`, enough nodes) has the GPUs free, so the count alone would admit a task
 * that then pends in Slurm for Resources. The pool therefore keeps two ledgers, and a task must fit
 * both:
 *  - the pool's free **count**: total − slots our live leases (or the worker's unfinished executions)
 *    hold − GPUs unavailable for a reason of their own. Never more GPUs submitted than Slurm has free.
 *  - each node's free GPUs: its GPUs − those unavailable for a reason of their own (foreign job,
 *    unhealthy, cordoned, unknown; a card names its node) − the GPUs our started jobs hold there (the
 *    execution's Slurm binding).
 * A lease whose job has not started has no binding: it holds a slot of the pool but no known node, so
 * it only counts against the total. Guessing a node for it would be worse either way: charged to the
 * wrong node it would refuse a task Slurm could start, and charged to every node it would refuse tasks
 * for as long as the job pends. The total still bounds what is submitted, and once the job starts its
 * binding moves the charge to the right node.
 */

/** One node of a Slurm pool in a scheduling pass. */
export interface PoolNode {
  name: string;
  /**
   * GPUs free there now: its GPUs less those unavailable for their own reason, less our started jobs'
   * GPUs there, less what this pass claimed or reserved there.
   */
  free: number;
  /** GPUs our jobs hold there or this pass claimed there: they end, so a reservation may wait for them. */
  later: number;
  /** What reservations of this pass hold there (for explaining a later task's wait). */
  holds: NodeHold[];
}

/** A reservation's GPUs on one node. */
export interface NodeHold {
  /** Which reservation of the pass (1-based). */
  reservation: number;
  count: number;
}

/** A node's free GPUs with the holds of the first `reservationsBefore` reservations given back. */
function freeWith(node: PoolNode, reservationsBefore: number): number {
  let free = node.free;
  if (reservationsBefore > 0)
    for (const h of node.holds) if (h.reservation <= reservationsBefore) free += h.count;
  return free;
}

/** How many nodes a shape needs and how many GPUs on each: one node of `need`, or need/per_node nodes. */
function shapeOf(need: number, perNode: number | null): { nodes: number; each: number } {
  return perNode === null ? { nodes: 1, each: need } : { nodes: Math.ceil(need / perNode), each: perNode };
}

/**
 * Whether the nodes can take the shape now: one node with `need` free, or need/per_node distinct nodes
 * with `per_node` free each; the holds of the first `reservationsBefore` reservations count as free.
 */
export function nodesFit(
  nodes: readonly PoolNode[],
  need: number,
  perNode: number | null,
  reservationsBefore = 0,
): boolean {
  const { nodes: wanted, each } = shapeOf(need, perNode);
  let found = 0;
  for (const node of nodes) if (freeWith(node, reservationsBefore) >= each && ++found >= wanted) return true;
  return false;
}

/**
 * How many of the shape's GPUs the nodes could take now: the most free on one node (capped at `need`),
 * or the sum over the need/per_node nodes with the most free of min(free, per_node).
 */
export function nodesFree(nodes: readonly PoolNode[], need: number, perNode: number | null): number {
  const { nodes: wanted, each } = shapeOf(need, perNode);
  const best = nodes.map((n) => Math.min(n.free, each)).sort((a, b) => b - a);
  let sum = 0;
  for (let i = 0; i < wanted && i < best.length; i++) sum += best[i] as number;
  return sum;
}

/**
 * Takes the shape from the nodes, best fit: the node (or need/per_node nodes) with the fewest free
 * GPUs that still hold it, ties to the name order, so that larger holes stay whole for larger tasks.
 * Call only after {@link nodesFit} said yes. The node choice only guards admission: Slurm places.
 */
export function claimNodes(nodes: readonly PoolNode[], need: number, perNode: number | null): void {
  const { nodes: wanted, each } = shapeOf(need, perNode);
  const chosen = nodes
    .filter((n) => n.free >= each)
    .sort((a, b) => a.free - b.free)
    .slice(0, wanted);
  for (const node of chosen) {
    node.free -= each;
    node.later += each;
  }
}

/**
 * For an aged task: the nodes where its shape will fit first, i.e. the node (or need/per_node nodes)
 * whose free plus `later` GPUs reach the shape, preferring the most free, ties to the name order; and
 * how many GPUs it could hold there now. Null when no node set qualifies. Changes nothing.
 */
export function nodesToReserve(
  nodes: readonly PoolNode[],
  need: number,
  perNode: number | null,
): { nodes: PoolNode[]; holdable: number } | null {
  const { nodes: wanted, each } = shapeOf(need, perNode);
  const chosen = nodes
    .filter((n) => n.free + n.later >= each)
    .sort((a, b) => b.free - a.free)
    .slice(0, wanted);
  if (chosen.length < wanted) return null;
  let holdable = 0;
  for (const node of chosen) holdable += Math.min(node.free, each);
  return { nodes: chosen, holdable };
}

/**
 * Holds `count` GPUs for reservation number `reservation` on the nodes {@link nodesToReserve} chose,
 * at most the shape's per-node GPUs on each.
 */
export function holdNodes(
  chosen: readonly PoolNode[],
  need: number,
  perNode: number | null,
  count: number,
  reservation: number,
): void {
  const { each } = shapeOf(need, perNode);
  let left = count;
  for (const node of chosen) {
    const n = Math.min(node.free, each, left);
    if (n <= 0) continue;
    node.free -= n;
    node.holds.push({ reservation, count: n });
    left -= n;
  }
}

/**
 * A Slurm pool's free count and, when its cards name their nodes, its nodes (name order). See the
 * file comment. Slots held by a lease and devices unavailable for their own reason are counted
 * separately, so a leased slot whose device number a foreign job happens to use costs two, never
 * zero: the broker never submits more GPUs than Slurm has free.
 */
export function poolFacts(
  worker: WorkerView,
  cards: ReadonlyArray<{ view: CardView; state: CardState }>,
  now: number,
  config: CardStateConfig,
): { free: number; nodes: PoolNode[] | null } {
  let held = 0;
  let unavailable = 0;
  const byName = new Map<string, { gpus: number; unavailable: number }>();
  for (const { view, state } of cards) {
    const isHeld = view.leased || view.quarantined || view.held_by_worker === true;
    if (isHeld) held++;
    const own = isHeld
      ? deriveCardState(
          { card: { ...view, leased: false, quarantined: false, held_by_worker: false }, worker },
          now,
          config,
        ).state
      : state;
    const down = own !== 'AVAILABLE';
    if (down) unavailable++;
    if (view.node !== undefined) {
      let n = byName.get(view.node);
      if (n === undefined) {
        n = { gpus: 0, unavailable: 0 };
        byName.set(view.node, n);
      }
      n.gpus++;
      if (down) n.unavailable++;
    }
  }
  const free = Math.max(0, cards.length - held - unavailable);
  if (byName.size === 0) return { free, nodes: null };
  const bound = new Map<string, number>();
  for (const b of worker.pool_bound ?? []) bound.set(b.node, (bound.get(b.node) ?? 0) + b.gpus);
  const nodes = [...byName.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, n]): PoolNode => {
      const ours = bound.get(name) ?? 0;
      return { name, free: Math.max(0, n.gpus - n.unavailable - ours), later: ours, holds: [] };
    });
  return { free, nodes };
}

/**
 * Whether a Slurm pool has the nodes a task's shape needs, whatever their state: need/per_node nodes
 * with at least `per_node` GPUs each (one node with `need` GPUs for a single-node task). True when the
 * worker is not a pool or did not say its nodes.
 */
export function poolShapeFits(worker: WorkerView, need: number, perNode: number | null): boolean {
  const nodes = worker.pool_node_gpus;
  if (worker.backend !== 'slurm' || nodes === undefined || nodes.length === 0) return true;
  const { nodes: wanted, each } = shapeOf(need, perNode);
  return nodes.filter((g) => g >= each).length >= wanted;
}
