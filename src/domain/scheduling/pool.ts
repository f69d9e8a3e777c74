import { type CardState, type CardStateConfig, deriveCardState } from '../card-state.js';
import {
  claimNodes,
  holdNodes,
  nodesFit,
  nodesFree,
  nodesToReserve,
  type PoolNode,
  poolFacts,
  poolShapeFits,
} from './nodes.js';
import {
  cordoned,
  describeNeed,
  holdingReservation,
  mountMissing,
  multiNodeNeedsSlurm,
  type NodeShortfall,
  noContainerEngine,
  noMatchingWorker,
  reservedForOlderTask,
  unknownPinnedWorker,
  waitingForCards,
  workerOffline,
  workersOffline,
  workerUnisolated,
} from './reasons.js';
import type { CardView, QueuedTaskView, SchedulingConfig, WaitReason, WorkerView } from './types.js';

/**
 * The cards of one scheduling pass and what has happened to them so far in it. Built once per pass;
 * `decide` (scheduling.ts) walks the queue and asks it to place, reserve or explain each task.
 *
 * Cost model. 64 workers × 8 cards with 10,000 queued tasks takes 5-12 ms per pass on the shared
 * 2-core dev machine (1-card tasks; mixed 1-8-card tasks with model and memory constraints; with and
 * without aged tasks). Card states are derived once, each usable worker keeps its free cards in index
 * order with a running count, and free cards are only ever claimed or reserved within a pass, never
 * released, so:
 *  - when fewer free cards remain anywhere than a task needs, placement is skipped outright;
 *  - a requirement shape that failed to place once stays unplaceable for the rest of the pass;
 *  - a wait reason is computed once the pass is settled and cached per requirement shape.
 * A Slurm pool adds one O(nodes) check per placement attempt on it (nodes.ts); node free
 * counts, like cards, only ever go down within a pass, so the shortcuts above still hold.
 */

/** What a free card is doing in this pass. */
const OPEN = 0;
const CLAIMED = 1;
const RESERVED = 2;

/** One card with its derived state and its mark in this pass. */
interface PoolCard {
  view: CardView;
  /** The card's model as padded lower-case words (see modelWords). */
  words: string;
  state: CardState;
  /** The qualification run this card is reserved for (only that run's tasks may use it), or null. */
  run: string | null;
  /** An operator cordon (not a run's reservation) keeps every task off it. */
  cordoned: boolean;
  /** OPEN, CLAIMED or RESERVED; meaningful only for free-list cards. */
  mark: number;
  /** When RESERVED: which reservation of the pass (1-based) holds it, and that task's queue position. */
  reservation: number;
  holderPosition: number;
}

/** One worker's cards in this pass. */
interface Slot {
  worker: WorkerView;
  /** Online and not draining: only these get grants or reservations. */
  usable: boolean;
  /** All cards, ascending index. */
  cards: PoolCard[];
  /** AVAILABLE cards of a usable worker, ascending index: the only cards that can be granted. */
  free: PoolCard[];
  /** How many of `free` are still OPEN. */
  openCount: number;
  /** How many of `free` are reserved for a qualification run (they match only that run's tasks). */
  runReserved: number;
  /** A usable Slurm pool whose cards name their nodes: each node's free GPUs (nodes.ts). */
  nodes: PoolNode[] | null;
}

/** A task's card requirement, normalised once. Tasks with the same `key` are placed identically. */
export interface Requirement {
  key: string;
  need: number;
  /** The model as the task gave it (for messages), or null. */
  model: string | null;
  /** The model as padded lower-case words, or null when any model will do. */
  modelWords: string | null;
  minMemoryMib: number | null;
  /** Pinned worker id, or null. */
  worker: string | null;
  /** The qualification run the task belongs to, or null: it matches only cards reserved for that run. */
  run: string | null;
  /** A container task: only workers with a container engine may take it. */
  container: boolean;
  /** Named data mounts, sorted: only workers offering all of them may take it. */
  mounts: string[];
  /** Multi-node (`cards.per_node`): only Slurm pool workers may take it; null for one host. */
  perNode: number | null;
}

/** What never changes for a requirement within a pass: where it may run, or why it never can. */
export interface RequirementView {
  req: Requirement;
  /** Why it cannot start this pass whatever else happens, or null. */
  blocked: WaitReason | null;
  /** Usable workers, by id, with at least `need` matching uncordoned cards. */
  slots: Slot[];
  /** Matching AVAILABLE cards on `slots` at the start of the pass. */
  eligible: number;
}

/** Reads a queued task's requirement. */
export function requirementOf(task: QueuedTaskView): Requirement {
  const model = task.cards.model ?? null;
  const minMemoryMib = task.cards.min_memory_mib ?? null;
  const worker = task.worker ?? null;
  const run = task.run_id ?? null;
  const container = task.runtime === 'container';
  const mounts = [...(task.mounts ?? [])].sort();
  const perNode = task.cards.per_node ?? null;
  return {
    key: JSON.stringify([task.cards.count, model, minMemoryMib, worker, run, container, mounts, perNode]),
    need: task.cards.count,
    model,
    modelWords: model === null ? null : modelWords(model),
    minMemoryMib,
    worker,
    run,
    container,
    mounts,
    perNode,
  };
}

/**
 * Whether a card's model satisfies a wanted model: case-insensitive, on whole words, ignoring
 * punctuation. "a100" and "A100-SXM4" match "NVIDIA A100-SXM4-80GB", "A10" does not (a plain substring
 * test would hand an A100 to a task that asked for an A10); "K100" matches Hygon's "DCU K100_AI".
 */
export function modelMatches(cardModel: string, wanted: string): boolean {
  const needle = modelWords(wanted);
  return needle !== '' && modelWords(cardModel).includes(needle);
}

/** Lower-case letter/digit words joined by single spaces and padded with one space each side. */
function modelWords(model: string): string {
  const words = model
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w !== '');
  return words.length === 0 ? '' : ` ${words.join(' ')} `;
}

/**
 * Whether a task may use the card: a card reserved for a qualification run matches only that run's
 * tasks, and a run's task matches only its run's cards; then model and memory (see `fitsShape`).
 */
function matches(card: PoolCard, req: Requirement): boolean {
  return card.run === req.run && fitsShape(card, req);
}

/** Model and memory only, whatever reservation holds the card (capacity counts every card). */
function fitsShape(card: PoolCard, req: Requirement): boolean {
  if (req.modelWords !== null && (req.modelWords === '' || !card.words.includes(req.modelWords)))
    return false;
  if (req.minMemoryMib !== null) {
    const total = card.view.memory_total_mib;
    if (total === null || total < req.minMemoryMib) return false;
  }
  return true;
}

/** See the file comment. */
export class CardPool {
  private readonly slots: Slot[];
  private readonly slotById = new Map<string, Slot>();
  private readonly views = new Map<string, RequirementView>();
  private readonly unplaceable = new Set<string>();
  private readonly reasons = new Map<string, WaitReason>();
  /** OPEN free cards over all usable workers. */
  private openTotal = 0;
  /** Free cards reserved for qualification runs, over all usable workers (they defeat the fast paths). */
  private runReservedTotal = 0;
  private reservationCount = 0;
  /** Bumped on every claim or reservation, so a reason cached before one is never reused after it. */
  private version = 0;

  /** `policy.require_isolation`: unisolated workers take no task. */
  private readonly requireIsolation: boolean;

  constructor(
    workers: readonly WorkerView[],
    now: number,
    config: CardStateConfig & Pick<SchedulingConfig, 'require_isolation'>,
  ) {
    this.requireIsolation = config.require_isolation;
    this.slots = [...workers]
      .sort((a, b) => compareIds(a.worker_id, b.worker_id))
      .map((worker) => {
        const usable = worker.online && !worker.draining;
        const cards = [...worker.cards]
          .sort((a, b) => a.index - b.index)
          .map((view) => {
            const run = view.reserved_for_run ?? null;
            // A run's reservation is a cordon to everyone else, which `matches` enforces; for the
            // card's own state it does not count, so the run's tasks see the card as it really is.
            const card = run === null ? view : { ...view, cordoned: false };
            return {
              view,
              words: modelWords(view.model),
              state: deriveCardState({ card, worker }, now, config).state,
              run,
              cordoned: card.cordoned,
              mark: OPEN,
              reservation: 0,
              holderPosition: 0,
            };
          });
        let free = usable ? cards.filter((c) => c.state === 'AVAILABLE') : [];
        // A Slurm worker's cards are a pool (docs/decisions/0013-slurm-backend.md): Slurm, not the
        // index, decides which device a job gets, so only the pool's free *count* may be offered, and
        // a task must also fit the free GPUs of its node(s).
        let nodes: PoolNode[] | null = null;
        if (usable && worker.backend === 'slurm') {
          const facts = poolFacts(worker, cards, now, config);
          free = free.slice(0, facts.free);
          nodes = facts.nodes;
        }
        const runReserved = free.filter((c) => c.run !== null).length;
        this.openTotal += free.length;
        this.runReservedTotal += runReserved;
        return { worker, usable, cards, free, openCount: free.length, runReserved, nodes };
      });
    for (const slot of this.slots) this.slotById.set(slot.worker.worker_id, slot);
  }

  /** The pass-long view of a requirement (cached per shape). */
  viewOf(req: Requirement): RequirementView {
    let view = this.views.get(req.key);
    if (view === undefined) {
      view = this.buildView(req);
      this.views.set(req.key, view);
    }
    return view;
  }

  /**
   * Best fit: the usable worker with the fewest free matching cards that still holds `need`, ties to
   * the lower worker id; there, the lowest indexes. Claims them, or returns null when nothing fits.
   * On a Slurm pool the shape must also fit the free GPUs of its node(s), which the claim reduces.
   */
  place(view: RequirementView): { worker_id: string; card_indexes: number[] } | null {
    const { req } = view;
    if (this.openTotal < req.need || this.unplaceable.has(req.key)) return null;
    const anyCard = req.modelWords === null && req.minMemoryMib === null && req.run === null;
    let best: Slot | null = null;
    let bestCount = Number.POSITIVE_INFINITY;
    for (const slot of view.slots) {
      if (slot.openCount < req.need) continue;
      const count = anyCard && slot.runReserved === 0 ? slot.openCount : this.countOpen(slot, req);
      if (count >= req.need && count < bestCount) {
        if (slot.nodes !== null && !nodesFit(slot.nodes, req.need, req.perNode)) continue;
        best = slot;
        bestCount = count;
        if (count === req.need) break; // nothing can fit tighter; later slots only lose the tie
      }
    }
    if (best === null) {
      this.unplaceable.add(req.key);
      return null;
    }
    if (best.nodes !== null) claimNodes(best.nodes, req.need, req.perNode);
    return { worker_id: best.worker.worker_id, card_indexes: this.mark(best, req, req.need, CLAIMED, 0) };
  }

  /**
   * For an aged task that could not be placed: hold the free matching cards of the worker where it will
   * fit first, i.e. whose free plus leased matching cards (leases end; foreign or unknown cards may not)
   * reach `need`, preferring the most free ones, ties to the lower worker id. Null when no worker
   * qualifies or none has a free matching card to hold. On a Slurm pool the same holds per node: it
   * holds GPUs only on the node(s) where the shape will fit first, never more than they have free.
   */
  reserve(
    view: RequirementView,
    position: number,
  ): { reservation: { worker_id: string; card_indexes: number[] }; reason: WaitReason } | null {
    const { req } = view;
    if (this.openTotal === 0) return null;
    let best: Slot | null = null;
    let bestOpen = 0;
    let bestNodes: PoolNode[] | null = null;
    for (const slot of view.slots) {
      if (slot.openCount <= bestOpen) continue;
      let open = this.countOpen(slot, req);
      if (open <= bestOpen) continue;
      let later = 0;
      for (const card of slot.cards) {
        const leased = card.state === 'LEASED' && !card.cordoned;
        const busyWithUs = leased || (card.state === 'AVAILABLE' && card.mark === CLAIMED);
        if (busyWithUs && matches(card, req)) later++;
      }
      if (open + later < req.need) continue;
      let onNodes: PoolNode[] | null = null;
      if (slot.nodes !== null) {
        const plan = nodesToReserve(slot.nodes, req.need, req.perNode);
        if (plan === null) continue;
        open = Math.min(open, plan.holdable);
        if (open <= bestOpen) continue;
        onNodes = plan.nodes;
      }
      best = slot;
      bestOpen = open;
      bestNodes = onNodes;
    }
    if (best === null) return null;
    const held = Math.min(bestOpen, req.need);
    this.reservationCount++;
    if (bestNodes !== null) holdNodes(bestNodes, req.need, req.perNode, held, this.reservationCount);
    const card_indexes = this.mark(best, req, held, RESERVED, position);
    const worker_id = best.worker.worker_id;
    return {
      reservation: { worker_id, card_indexes },
      reason: holdingReservation(worker_id, held, req.need),
    };
  }

  /**
   * Why a task that could run in principle did not start: the free cards it would fit in are held by
   * one of the first `reservationsBefore` reservations (those made for tasks ahead of it), or too few
   * matching cards are free on any one worker (on a Slurm pool: on any one node, or on enough nodes).
   * Call once placement and reservations are done.
   */
  waitReason(view: RequirementView, reservationsBefore: number): WaitReason {
    // A shape's reason depends only on which reservations came before it; cache on exactly that.
    const key = `${view.req.key}#${reservationsBefore}#${this.version}`;
    let reason = this.reasons.get(key);
    if (reason === undefined) {
      reason = this.explain(view, reservationsBefore);
      this.reasons.set(key, reason);
    }
    return reason;
  }

  private explain(view: RequirementView, reservationsBefore: number): WaitReason {
    const { req } = view;
    const anyCard = req.modelWords === null && req.minMemoryMib === null && req.run === null;
    const counted = this.reservationCount === 0 && this.runReservedTotal === 0 && anyCard;
    let free = 0;
    // The first pool whose free count would hold the task but whose nodes do not, for the message.
    let split: NodeShortfall | null = null;
    for (const slot of view.slots) {
      let open = 0;
      if (counted) open = slot.openCount;
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

  private buildView(req: Requirement): RequirementView {
    const blockedView = (blocked: WaitReason): RequirementView => ({ req, blocked, slots: [], eligible: 0 });
    let allowed: Slot[] = this.slots;
    if (req.worker !== null) {
      const pinned = this.slotById.get(req.worker);
      if (pinned === undefined) return blockedView(unknownPinnedWorker(req.need, req.worker));
      allowed = [pinned];
    }
    // Capacity counts cards in any state, reserved or not: a worker that could never hold the task
    // rules itself out.
    let largest = 0;
    const capable: Slot[] = [];
    for (const slot of allowed) {
      let n = 0;
      for (const card of slot.cards) if (fitsShape(card, req)) n++;
      // A Slurm pool must also have the nodes the job's shape needs (Slurm would refuse it at sbatch).
      if (!poolShapeFits(slot.worker, req.need, req.perNode)) n = Math.min(n, req.need - 1);
      largest = Math.max(largest, n);
      if (n >= req.need) capable.push(slot);
    }
    if (largest < req.need) {
      const needText = describeNeed(req.need, req.model, req.minMemoryMib);
      return blockedView(noMatchingWorker(needText, req.need, largest, req.worker));
    }
    // How a worker runs tasks rules it out before its liveness does: waiting for it to come back would
    // not help.
    let runnable = capable;
    if (req.perNode !== null) {
      runnable = capable.filter((s) => s.worker.backend === 'slurm');
      if (runnable.length === 0)
        return blockedView(multiNodeNeedsSlurm(req.need, req.perNode, capable.length, req.worker));
    }
    if (req.container) {
      runnable = capable.filter((s) => s.worker.container_engine !== null);
      if (runnable.length === 0) return blockedView(noContainerEngine(req.need, capable.length, req.worker));
    }
    if (req.mounts.length > 0) {
      runnable = runnable.filter((s) => req.mounts.every((m) => s.worker.mounts?.includes(m)));
      if (runnable.length === 0) return blockedView(mountMissing(req.need, req.mounts, req.worker));
    }
    if (this.requireIsolation) {
      const isolated = runnable.filter((s) => s.worker.isolation !== 'none');
      if (isolated.length === 0) return blockedView(workerUnisolated(req.need, runnable.length, req.worker));
      runnable = isolated;
    }
    const usable = runnable.filter((s) => s.usable);
    if (usable.length === 0) {
      if (req.worker !== null) {
        const w = (runnable[0] as Slot).worker;
        return blockedView(workerOffline(w.worker_id, w.online && w.draining));
      }
      const offline = runnable.filter((s) => !s.worker.online).length;
      return blockedView(workersOffline(req.need, offline, runnable.length - offline));
    }
    let uncordoned = 0;
    const slots: Slot[] = [];
    let eligible = 0;
    for (const slot of usable) {
      let n = 0;
      // Cards reserved for another run (or, for a run's task, every card outside its reservation)
      // count as cordoned here: `matches` leaves them out.
      for (const card of slot.cards) if (!card.cordoned && matches(card, req)) n++;
      uncordoned = Math.max(uncordoned, n);
      if (n < req.need) continue;
      slots.push(slot);
      for (const card of slot.free) if (matches(card, req)) eligible++;
    }
    if (slots.length === 0) return blockedView(cordoned(req.need, uncordoned));
    return { req, blocked: null, slots, eligible };
  }

  private countOpen(slot: Slot, req: Requirement): number {
    let n = 0;
    for (const card of slot.free) if (card.mark === OPEN && matches(card, req)) n++;
    return n;
  }

  /** Marks the `count` lowest-index OPEN matching cards of `slot`; returns their indexes. */
  private mark(slot: Slot, req: Requirement, count: number, mark: number, position: number): number[] {
    const indexes: number[] = [];
    for (const card of slot.free) {
      if (indexes.length === count) break;
      if (card.mark !== OPEN || !matches(card, req)) continue;
      card.mark = mark;
      if (mark === RESERVED) {
        card.reservation = this.reservationCount;
        card.holderPosition = position;
      }
      indexes.push(card.view.index);
    }
    slot.openCount -= count;
    this.openTotal -= count;
    this.version++;
    return indexes;
  }
}

function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
