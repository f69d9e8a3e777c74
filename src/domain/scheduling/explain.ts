import type { RequirementView } from './feasibility.js';
import { nodesFit, nodesFree } from './nodes.js';
import { type NodeShortfall, reservedForOlderTask, waitingForCards } from './reasons.js';
import { CLAIMED, matches, OPEN } from './slots.js';
import type { WaitReason } from './types.js';

/** What the pass has done so far, as far as explaining a wait needs it. */
export interface PassMarks {
  /** Reservations made in the pass so far. */
  readonly reservationCount: number;
  /** Free cards reserved for qualification runs, over all usable workers. */
  readonly runReservedTotal: number;
}

/**
 * Why a task that could run in principle did not start: the free cards it would fit in are held by
 * one of the first `reservationsBefore` reservations (those made for tasks ahead of it), or too few
 * matching cards are free on any one worker (on a Slurm pool: on any one node, or on enough nodes).
 * Read once placement and reservations are done (CardPool.waitReason caches it).
 */
export function explainWait(view: RequirementView, reservationsBefore: number, pass: PassMarks): WaitReason {
  const { req } = view;
  const anyCard =
    req.modelWords === null && req.minMemoryMib === null && req.run === null && req.excluded === null;
  const counted = pass.reservationCount === 0 && pass.runReservedTotal === 0 && anyCard;
  let free = 0;
  // The first pool whose free count would hold the task but whose nodes do not, for the message.
  let split: NodeShortfall | null = null;
  for (const slot of view.slots) {
    let open = 0;
    if (counted && slot.slices === 0) open = slot.openCount;
    else {
      let reserved = 0;
      let firstHolder = Number.POSITIVE_INFINITY;
      for (const card of slot.free) {
        if (card.mark === CLAIMED || !matches(card, req)) continue;
        if (card.mark === OPEN) open++;
        else if (card.reservation <= reservationsBefore) {
          reserved++;
          firstHolder = Math.min(firstHolder, card.holderPosition);
        }
      }
      // Scanning in worker-id order, the first worker a reservation blocks is the one named.
      const nodesWouldFit =
        slot.nodes === null || nodesFit(slot.nodes, req.need, req.perNode, reservationsBefore);
      if (reserved > 0 && open + reserved >= req.need && nodesWouldFit) {
        return reservedForOlderTask(firstHolder, slot.worker.worker_id);
      }
    }
    if (slot.nodes !== null) {
      const onNodes = nodesFree(slot.nodes, req.need, req.perNode);
      if (split === null && open >= req.need && onNodes < req.need) {
        split = {
          worker_id: slot.worker.worker_id,
          per_node: req.perNode,
          pool_free: open,
          nodes: slot.nodes,
        };
      }
      open = Math.min(open, onNodes);
    }
    free = Math.max(free, open);
  }
  return waitingForCards(req.need, view.eligible, free, split);
}
