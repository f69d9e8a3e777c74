import { MIG_INDEX_BASE } from '../../contracts/sample.js';
import { type CardState, type CardStateConfig, deriveCardState } from '../machines/card-state.js';
import { type PoolNode, poolFacts } from './nodes.js';
import { modelWords, type Requirement } from './requirement.js';
import type { CardView, WorkerView } from './types.js';

/**
 * The cards of one scheduling pass, per worker, with each card's derived state and its mark in the pass
 * (see CardPool in pool.ts), and whether a card matches a requirement.
 */

/** What a free card is doing in this pass. */
export const OPEN = 0;
export const CLAIMED = 1;
export const RESERVED = 2;

/** One card with its derived state and its mark in this pass. */
export interface PoolCard {
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
  /**
   * By when (ms) the card is free again at the latest: a leased card's `lease_ends_by`, a card claimed in
   * this pass its task's start plus time limit; +Infinity when not known. Meaningless on an OPEN card.
   */
  endsBy: number;
  /**
   * When RESERVED: the earliest time its reservation's task can start (when the last lease it waits for
   * ends by); a task that ends by then may take the card (backfill). -Infinity: nothing promised.
   */
  shadow: number;
}

/** One worker's cards in this pass. */
export interface Slot {
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
  /** How many of `free` are MIG slices (they match only tasks that ask for slices, ADR 0046). */
  slices: number;
  /**
   * `free` smallest first, for tasks that take slices: slices by (compute slices, memory, index), then
   * whole cards by index; `free` itself where there are no slices.
   */
  bySize: PoolCard[];
  /** OPEN whole cards of `free` (the count an any-card task can take where `free` holds slices too). */
  openWhole: number;
  /** OPEN slices of `free` by profile, so a task naming a profile counts them without a scan. */
  openByProfile: Map<string, number>;
  /** A usable Slurm pool whose cards name their nodes: each node's free GPUs (nodes.ts). */
  nodes: PoolNode[] | null;
  /**
   * `countOpen`'s answers by requirement key, each with the `openCount` it was counted at: OPEN cards
   * only ever leave a pass's free list (marked), and every mark lowers `openCount`, so an answer counted
   * at the current `openCount` is still right, and a queue of like tasks scans each slot once per grant
   * on it instead of once per task.
   */
  openMemo: Map<string, { readonly at: number; readonly n: number }>;
}

/** What building the slots of a pass counted: every usable free card, and those reserved for a run. */
export interface SlotTotals {
  open: number;
  runReserved: number;
}

/** The pass's slots, by worker id; free cards limited to a Slurm pool's free count (nodes.ts). */
export function buildSlots(
  workers: readonly WorkerView[],
  now: number,
  config: CardStateConfig,
): { slots: Slot[]; totals: SlotTotals } {
  const totals: SlotTotals = { open: 0, runReserved: 0 };
  const slots = [...workers]
    .sort((a, b) => compareIds(a.worker_id, b.worker_id))
    .map((worker): Slot => {
      const usable = worker.online && !worker.draining;
      const cards = [...worker.cards]
        .sort((a, b) => a.index - b.index)
        .map((view) => poolCard(view, worker, now, config));
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
      const slices = free.filter((c) => c.view.index >= MIG_INDEX_BASE).length;
      const bySize = slices === 0 ? free : [...free].sort(smallestFirst);
      const openByProfile = new Map<string, number>();
      for (const c of free)
        if (c.view.mig !== undefined)
          openByProfile.set(c.view.mig.profile, (openByProfile.get(c.view.mig.profile) ?? 0) + 1);
      totals.open += free.length;
      totals.runReserved += runReserved;
      return {
        worker,
        usable,
        cards,
        free,
        openCount: free.length,
        runReserved,
        slices,
        bySize,
        openWhole: free.length - slices,
        openByProfile,
        nodes,
        openMemo: new Map(),
      };
    });
  return { slots, totals };
}

function poolCard(view: CardView, worker: WorkerView, now: number, config: CardStateConfig): PoolCard {
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
    endsBy: view.leased ? (view.lease_ends_by ?? Number.POSITIVE_INFINITY) : Number.POSITIVE_INFINITY,
    shadow: Number.NEGATIVE_INFINITY,
  };
}

/**
 * Whether a task may use the card: a card reserved for a qualification run matches only that run's
 * tasks, and a run's task matches only its run's cards; then model and memory (see `fitsShape`).
 */
export function matches(card: PoolCard, req: Requirement): boolean {
  return card.run === req.run && fitsShape(card, req);
}

/**
 * Model, memory and MIG only, whatever reservation holds the card (capacity counts every card). A MIG
 * slice (ADR 0046) fits only a task that asked for slices (of its profile, when one was named), and only
 * when both its capability minors are known (the sandbox binds them); a card in MIG mode fits no task;
 * a task that named a profile takes slices only. Model words match the parent's model.
 */
export function fitsShape(card: PoolCard, req: Requirement): boolean {
  const mig = req.mig;
  if (card.view.index >= MIG_INDEX_BASE) {
    const slice = card.view.mig;
    if (mig === 'never' || slice === undefined) return false;
    if (slice.gi_access_minor === null || slice.ci_access_minor === null) return false;
    if (mig !== 'allowed' && slice.profile !== mig.profile) return false;
  } else if (mig !== 'never' && mig !== 'allowed') return false;
  else if (card.view.mig_mode === 'enabled') return false;
  if (req.modelWords !== null && (req.modelWords === '' || !card.words.includes(req.modelWords)))
    return false;
  // Models whose quota the task's account line has filled this pass (ADR 0048).
  if (req.excluded !== null) for (const w of req.excluded) if (card.words.includes(w)) return false;
  if (req.minMemoryMib !== null) {
    const total = card.view.memory_total_mib;
    if (total === null || total < req.minMemoryMib) return false;
  }
  return true;
}

/**
 * How many of `slot`'s free cards are still OPEN and match `req`, from the slot's counts where `req`
 * asks for nothing but the kind of card (no model, memory, run or excluded models), else by a scan.
 */
export function countOpenFast(slot: Slot, req: Requirement): number {
  if (
    req.modelWords !== null ||
    req.minMemoryMib !== null ||
    req.run !== null ||
    req.excluded !== null ||
    slot.runReserved > 0
  )
    return countOpen(slot, req);
  if (req.mig === 'never') return slot.openWhole;
  if (req.mig === 'allowed') return slot.openCount;
  return slot.openByProfile.get(req.mig.profile) ?? 0;
}

/** How many of `slot`'s free cards are still OPEN and match `req` (remembered until a card is marked). */
export function countOpen(slot: Slot, req: Requirement): number {
  const memo = slot.openMemo.get(req.key);
  if (memo !== undefined && memo.at === slot.openCount) return memo.n;
  let n = 0;
  for (const card of slot.free) if (card.mark === OPEN && matches(card, req)) n++;
  slot.openMemo.set(req.key, { at: slot.openCount, n });
  return n;
}

/** The order of `Slot.bySize`: slices smallest first (compute slices, memory, index), whole cards last. */
export function smallestFirst(a: PoolCard, b: PoolCard): number {
  return sizeOrder(a, b) || a.view.index - b.view.index;
}

/** Which card is smaller: fewer compute slices, then less memory; whole cards after every slice. */
export function sizeOrder(a: PoolCard, b: PoolCard): number {
  return sizeKey(a) - sizeKey(b) || sliceMemory(a) - sliceMemory(b);
}

/** The smallest OPEN free card of `slot` that `req` may use (`Slot.bySize` order), or null. */
export function firstOpen(slot: Slot, req: Requirement): PoolCard | null {
  for (const card of slot.bySize) if (card.mark === OPEN && matches(card, req)) return card;
  return null;
}

function sizeKey(card: PoolCard): number {
  return card.view.mig?.compute_slices ?? 8;
}

function sliceMemory(card: PoolCard): number {
  return card.view.mig === undefined ? 0 : (card.view.memory_total_mib ?? 0);
}

function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
