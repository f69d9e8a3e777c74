import type { CardStateConfig } from '../machines/card-state.js';
import { explainWait } from './explain.js';
import { buildView, type RequirementView } from './feasibility.js';
import { HostRooms, type RoomName, type RoomView } from './host-room.js';
import { claimNodes, holdNodes, nodesFit, nodesToReserve, type PoolNode } from './nodes.js';
import { holdingReservation } from './reasons.js';
import type { Requirement } from './requirement.js';
import {
  buildSlots,
  CLAIMED,
  countOpen,
  countOpenFast,
  firstOpen,
  matches,
  OPEN,
  type PoolCard,
  RESERVED,
  type Slot,
  sizeOrder,
} from './slots.js';
import type { SchedulingConfig, WaitReason, WorkerView } from './types.js';

export type { RequirementView } from './feasibility.js';
export { modelMatches, type RequirementCache, requirementOf } from './requirement.js';

/** A worker where cards could be reclaimed for a requirement (`CardPool.reclaimPlaces`). */
export interface ReclaimPlace {
  readonly worker_id: string;
  /** Free matching cards still open in this pass. */
  readonly open: number;
  /** Indexes of its leased, uncordoned cards that match. */
  readonly leased: ReadonlySet<number>;
  /**
   * Its host's room no task was promised yet (memory and task-dir disk in MiB, CPUs), this pass's grants
   * counted, and what the task would take of it there; null: host not known (nothing ruled out).
   */
  readonly room: RoomView | null;
  /** Padded model words of its OPEN matching free cards, in index order (model quotas, ADR 0048). */
  readonly open_words: readonly string[];
  /** The distinct padded model words of those and of its leased matching cards. */
  readonly models: readonly string[];
}

/**
 * The cards of one scheduling pass and what has happened to them so far in it. Built once per pass;
 * `decide` (decide.ts) walks the queue and asks it to place, reserve or explain each task. Its parts:
 * the requirement (requirement.ts), the slots and card marks (slots.ts), the feasibility chain
 * (feasibility.ts), the hosts' room (host-room.ts) and the wait explanation (explain.ts).
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
  /** The latest shadow of any reservation of this pass (`promise`): no task ending later backfills. */
  private maxShadow = Number.NEGATIVE_INFINITY;
  /**
   * Each reservation's card indexes as the decision lists them, and its holder's wait reason (backfill
   * takes cards out of both, so neither says it holds a card a backfilled task took).
   */
  private readonly held = new Map<number, { cards: number[]; reason: WaitReason }>();
  /** Workers holding reserved cards with a shadow: the only places backfill looks. */
  private readonly shadowSlots = new Set<Slot>();
  /** Reserved cards with a shadow, still held (backfill needs these plus open cards to reach `need`). */
  private shadowed = 0;
  /** Bumped whenever `promise` adds shadowed cards: only that can let a failed backfill succeed. */
  private shadowVersion = 0;
  /**
   * Per requirement shape, the earliest end that found nothing to backfill as of `shadowVersion`: a task
   * of that shape ending as late or later finds nothing either (claims only take cards away).
   */
  private readonly noBackfill = new Map<string, { version: number; endsBy: number }>();
  /** Bumped on every claim or reservation, so a reason cached before one is never reused after it. */
  private version = 0;

  /** `policy.require_isolation`: unisolated workers take no task. */
  private readonly requireIsolation: boolean;
  /** `policy.task_limits.host_reserve`: what each host keeps; absent: the default. */
  private readonly hostReserve: SchedulingConfig['host_reserve'];
  /** Each known host's room left this pass (host-room.ts). */
  private readonly rooms: HostRooms;

  constructor(
    workers: readonly WorkerView[],
    now: number,
    config: CardStateConfig & Pick<SchedulingConfig, 'require_isolation' | 'host_reserve' | 'room_per_card'>,
  ) {
    this.requireIsolation = config.require_isolation;
    this.hostReserve = config.host_reserve;
    const built = buildSlots(workers, now, config);
    this.slots = built.slots;
    this.openTotal = built.totals.open;
    this.runReservedTotal = built.totals.runReserved;
    for (const slot of this.slots) this.slotById.set(slot.worker.worker_id, slot);
    this.rooms = new HostRooms(this.slots, config);
  }

  /** The pass-long view of a requirement (cached per shape). */
  viewOf(req: Requirement): RequirementView {
    let view = this.views.get(req.key);
    if (view === undefined) {
      const { slots, slotById, requireIsolation, hostReserve } = this;
      view = buildView(req, { slots, slotById, requireIsolation, hostReserve });
      this.views.set(req.key, view);
    }
    return view;
  }

  /**
   * Best fit: the usable worker with the fewest free matching cards that still holds `need`, ties to
   * the lower worker id; there, the lowest indexes. Claims them, or returns null when nothing fits.
   * On a Slurm pool the shape must also fit the free GPUs of its node(s), which the claim reduces.
   */
  place(
    view: RequirementView,
    endsBy = Number.POSITIVE_INFINITY,
  ): { worker_id: string; card_indexes: number[] } | null {
    const { req } = view;
    if (this.openTotal < req.need || this.unplaceable.has(req.key)) return null;
    let best: Slot | null = null;
    let bestCount = Number.POSITIVE_INFINITY;
    let bestRoom: Record<RoomName, number> | null = null;
    // A task a slice may do (`cards.allow_mig`) takes the smallest card that fits anywhere, ties to the
    // fewest free (ADR 0046): the worker is chosen by its smallest matching free card first.
    const sized = req.mig === 'allowed';
    let bestCard: PoolCard | null = null;
    for (const slot of view.slots) {
      if (slot.openCount < req.need) continue;
      const count = countOpenFast(slot, req);
      const card = sized ? firstOpen(slot, req) : null;
      const bySize = card === null || bestCard === null ? 0 : sizeOrder(card, bestCard);
      if (count >= req.need && (bySize < 0 || (bySize === 0 && count < bestCount))) {
        if (slot.nodes !== null && !nodesFit(slot.nodes, req.need, req.perNode)) continue;
        // The host must have the memory and disk left that the task would be given (docs/operations.md "Task limits").
        const room = this.rooms.fits(slot, req);
        if (room === false) continue;
        best = slot;
        bestCount = count;
        bestRoom = room;
        bestCard = card;
        if (count === req.need && !sized) break; // nothing can fit tighter; later slots only lose the tie
      }
    }
    if (best === null) {
      this.unplaceable.add(req.key);
      return null;
    }
    // Room left only shrinks within a pass, so a shape refused before stays refused (`unplaceable`).
    this.rooms.take(best, bestRoom);
    if (best.nodes !== null) claimNodes(best.nodes, req.need, req.perNode);
    const card_indexes = this.mark(best, req, req.need, CLAIMED, 0, endsBy);
    return { worker_id: best.worker.worker_id, card_indexes };
  }

  /**
   * For an aged task that could not be placed: hold the free matching cards of the worker where it will
   * fit first, i.e. whose free plus leased matching cards (leases end; foreign or unknown cards may not)
   * reach `need`, preferring the most free ones, ties to the lower worker id. Null when no worker
   * qualifies or none has a free matching card to hold. On a Slurm pool the same holds per node: it
   * holds GPUs only on the node(s) where the shape will fit first, never more than they have free.
   * `promises`: whether the held cards may be backfilled (ADR 0049); false for a task cards are being
   * reclaimed for, whose victims stop now, long before the hard stops a shadow would be taken from.
   */
  reserve(
    view: RequirementView,
    position: number,
    promises = true,
  ): { reservation: { worker_id: string; card_indexes: number[] }; reason: WaitReason } | null {
    const { req } = view;
    if (this.openTotal === 0) return null;
    let best: Slot | null = null;
    let bestOpen = 0;
    let bestNodes: PoolNode[] | null = null;
    for (const slot of view.slots) {
      if (slot.openCount <= bestOpen) continue;
      let open = countOpen(slot, req);
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
    const reason = holdingReservation(worker_id, held, req.need);
    this.held.set(this.reservationCount, { cards: card_indexes, reason });
    // Never on a Slurm pool, whether or not its cards name their nodes (Slurm backfills its own jobs).
    if (promises && bestNodes === null && best.worker.backend !== 'slurm') this.promise(best, req, held);
    return { reservation: { worker_id, card_indexes }, reason };
  }

  /**
   * Why a task that could run in principle did not start: the free cards it would fit in are held by
   * one of the first `reservationsBefore` reservations (those made for tasks ahead of it), or too few
   * matching cards are free on any one worker (on a Slurm pool: on any one node, or on enough nodes).
   * Call once placement and reservations are done.
   */
  waitReason(view: RequirementView, reservationsBefore: number): WaitReason {
    // Cards were free for it, but not its host's memory or disk: that is the wait, not the cards.
    const short = this.rooms.shortReason(view.req.key);
    if (short !== null) return short;
    // A shape's reason depends only on which reservations came before it; cache on exactly that.
    const key = `${view.req.key}#${reservationsBefore}#${this.version}`;
    let reason = this.reasons.get(key);
    if (reason === undefined) {
      const { reservationCount, runReservedTotal } = this;
      reason = explainWait(view, reservationsBefore, { reservationCount, runReservedTotal });
      this.reasons.set(key, reason);
    }
    return reason;
  }

  /**
   * The reservation just made on `slot` (its `held` cards, the last ones marked) learns its shadow: when
   * the cards it waits for free at the latest, i.e. the (need − held)-th earliest `endsBy` among the
   * slot's leased and claimed matching cards. Unknown ends (+Infinity) promise nothing.
   */
  private promise(slot: Slot, req: Requirement, held: number): void {
    const ends: number[] = [];
    for (const card of slot.cards) {
      if (card.cordoned || !matches(card, req)) continue;
      if (card.state === 'LEASED' || (card.state === 'AVAILABLE' && card.mark === CLAIMED))
        ends.push(card.endsBy);
    }
    const wait = req.need - held;
    if (wait <= 0 || ends.length < wait) return;
    ends.sort((a, b) => a - b);
    const shadow = ends[wait - 1]!;
    if (shadow === Number.POSITIVE_INFINITY) return;
    for (const card of slot.free)
      if (card.mark === RESERVED && card.reservation === this.reservationCount) {
        card.shadow = shadow;
        this.shadowed++;
      }
    if (shadow > this.maxShadow) this.maxShadow = shadow;
    this.shadowSlots.add(slot);
    this.shadowVersion++;
  }

  /**
   * Backfill (ADR 0049): a task that could not be placed on open cards but will have ended by `endsBy`
   * (its time limit is a hard stop) may take cards an aged task holds, where that task cannot start
   * before `endsBy` anyway (the card's `shadow`): best fit over open plus such held cards, open cards
   * first. The reservation's start does not move. Never on a Slurm pool (Slurm backfills its own).
   */
  backfill(view: RequirementView, endsBy: number): { worker_id: string; card_indexes: number[] } | null {
    const { req } = view;
    if (endsBy > this.maxShadow || req.perNode !== null || this.openTotal + this.shadowed < req.need)
      return null;
    const failed = this.noBackfill.get(req.key);
    if (failed !== undefined && failed.version === this.shadowVersion && endsBy >= failed.endsBy) return null;
    let best: Slot | null = null;
    let bestCount = Number.POSITIVE_INFINITY;
    let bestRoom: Record<RoomName, number> | null = null;
    for (const slot of view.slots) {
      if (!this.shadowSlots.has(slot)) continue;
      let count = 0;
      let held = 0;
      for (const card of slot.free) {
        if (!matches(card, req)) continue;
        if (card.mark === OPEN) count++;
        else if (card.mark === RESERVED && card.shadow >= endsBy) held++;
      }
      if (held === 0 || count + held < req.need || count + held >= bestCount) continue;
      const room = this.rooms.fits(slot, req);
      if (room === false) continue;
      best = slot;
      bestCount = count + held;
      bestRoom = room;
    }
    if (best === null) {
      this.noBackfill.set(req.key, { version: this.shadowVersion, endsBy });
      return null;
    }
    this.rooms.take(best, bestRoom);
    const open = Math.min(countOpen(best, req), req.need);
    const card_indexes = open > 0 ? this.mark(best, req, open, CLAIMED, 0, endsBy) : [];
    for (const card of req.mig === 'never' ? best.free : best.bySize) {
      if (card_indexes.length === req.need) break;
      if (card.mark !== RESERVED || card.shadow < endsBy || !matches(card, req)) continue;
      card.mark = CLAIMED;
      card.endsBy = endsBy;
      this.shadowed--;
      card_indexes.push(card.view.index);
      // The reservation no longer holds it (the decision lists what each reservation holds).
      const holding = this.held.get(card.reservation);
      if (holding !== undefined) {
        holding.cards.splice(holding.cards.indexOf(card.view.index), 1);
        const { reason } = holding;
        if (reason.code === 'holding_reservation')
          Object.assign(reason, holdingReservation(reason.worker_id, holding.cards.length, reason.need));
      }
    }
    this.version++;
    return { worker_id: best.worker.worker_id, card_indexes: card_indexes.sort((a, b) => a - b) };
  }

  /**
   * Where cards could be reclaimed for `view` (reclaim.ts): each usable local worker it may run on, with
   * its OPEN matching free cards now, the indexes of its leased, uncordoned matching cards and its host's
   * CPUs left (a CPU ask the victims cannot free is no reason to stop them). A Slurm
   * pool is never reclaimed from (Slurm owns its jobs), nor a multi-node shape. `held`: the cards the
   * task's own reservation holds this pass; they are free for it, so they count as open where they are.
   */
  reclaimPlaces(
    view: RequirementView,
    held?: { readonly worker_id: string; readonly card_indexes: readonly number[] },
  ): ReclaimPlace[] {
    const { req } = view;
    if (req.perNode !== null) return [];
    const places: ReclaimPlace[] = [];
    for (const slot of view.slots) {
      if (slot.nodes !== null || slot.worker.backend === 'slurm') continue;
      const leased = new Set<number>();
      const models = new Set<string>();
      for (const card of slot.cards)
        if (card.state === 'LEASED' && !card.cordoned && matches(card, req)) {
          leased.add(card.view.index);
          models.add(card.words);
        }
      if (leased.size > 0) {
        const open_words: string[] = [];
        const own = held?.worker_id === slot.worker.worker_id ? held.card_indexes : [];
        for (const card of slot.free)
          if ((card.mark === OPEN || own.includes(card.view.index)) && matches(card, req)) {
            open_words.push(card.words);
            models.add(card.words);
          }
        places.push({
          worker_id: slot.worker.worker_id,
          open: open_words.length,
          leased,
          room: this.rooms.view(slot, req),
          open_words,
          models: [...models],
        });
      }
    }
    return places;
  }

  /**
   * The padded model words of `worker_id`'s cards `indexes` ('' for one not in the pass), for the model
   * quotas (ADR 0048): what a grant or a lease takes of each model.
   */
  cardWords(worker_id: string, indexes: readonly number[]): string[] {
    const cards = this.slotById.get(worker_id)?.cards ?? [];
    return indexes.map((i) => cards.find((c) => c.view.index === i)?.words ?? '');
  }

  /**
   * Marks the `count` lowest-index OPEN matching cards of `slot` (for a task that takes MIG slices: the
   * smallest first, ADR 0046); returns their indexes.
   */
  private mark(
    slot: Slot,
    req: Requirement,
    count: number,
    mark: number,
    position: number,
    endsBy = Number.POSITIVE_INFINITY,
  ): number[] {
    const indexes: number[] = [];
    for (const card of req.mig === 'never' ? slot.free : slot.bySize) {
      if (indexes.length === count) break;
      if (card.mark !== OPEN || !matches(card, req)) continue;
      card.mark = mark;
      const slice = card.view.mig;
      if (slice === undefined) slot.openWhole--;
      else slot.openByProfile.set(slice.profile, (slot.openByProfile.get(slice.profile) ?? 1) - 1);
      if (mark === RESERVED) {
        card.reservation = this.reservationCount;
        card.holderPosition = position;
      } else card.endsBy = endsBy;
      indexes.push(card.view.index);
    }
    slot.openCount -= count;
    this.openTotal -= count;
    this.version++;
    return indexes;
  }
}
