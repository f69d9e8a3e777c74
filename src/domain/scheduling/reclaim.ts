import type { AccountLimits } from './account-limits.js';
import { ROOMS, type RoomName } from './host-room.js';
import type { CardPool, ReclaimPlace, RequirementView } from './pool.js';
import { reclaiming } from './reasons.js';
import type { Preemption, RunningLeaseView, SchedulingSnapshot, WaitReason } from './types.js';

/**
 * Reclaim by preemption (docs/operations.md "Borrowing and reclaim",
 * docs/decisions/0044-reclaim-by-preemption.md). Pure. After a pass has placed what fits, a task that
 * waits for cards while its account asks within its nominal share (the account, and every account above
 * it with a nominal share, would hold at most that share with it) may take cards back from accounts that
 * borrow: their preemptible RUNNING tasks, newest lease first (those no bigger than what their account
 * borrows before any bigger one, so that it keeps its share where it can), on the one worker where the
 * fewest cards must stop. Never:
 *  - a task that is not preemptible (its spec's `preemptible`, or its account's policy),
 *  - a task preempted `max_preemptions_per_task` times already (it runs to its end),
 *  - a task of the claimant's own account line (the account, those above it, those below it),
 *  - a task of an account that does not borrow (holds no more than its nominal share),
 *  - on a Slurm pool, or for a multi-node shape,
 *  - where the claimant's memory, task-dir disk or `limits.cpus` would not fit its host even with the
 *    victims' own back (what it would be given there against what no task was promised yet),
 *  - for a task whose cards are already being reclaimed (it waits for those; no second round).
 * Cards being reclaimed from earlier passes count as their claimants' and no longer their victims'
 * accounts', so two passes never take an account below its share, nor give one beyond its share.
 * Where accounts have quotas per card model (ADR 0048), both count per model too: a claimant asks within
 * its share on a worker when it does for the models of the cards it would take there, and a victim's
 * account borrows on its lease's model when it holds more of it than its own quota's nominal share.
 * The cards stay the preempted lease's until its cleanup receipt releases it (fenced by its epoch, as
 * ever); the claimant goes first in the passes after that (`reclaiming` in the snapshot).
 */

/** Without a configured cap: how often one task may be preempted. */
export const DEFAULT_MAX_PREEMPTIONS = 3;

/** A task left waiting for cards in this pass, with its requirement's view. */
export interface ReclaimCandidate {
  readonly entry: { reason: WaitReason };
  readonly task_id: string;
  readonly account: string | undefined;
  readonly view: RequirementView;
  /** The cards its reservation holds this pass (an aged task or a claimant): free for it already. */
  readonly held?: { readonly worker_id: string; readonly card_indexes: readonly number[] } | undefined;
}

/** Wait codes that mean "cards, not something else": only these tasks may reclaim. */
const WAITS_FOR_CARDS: ReadonlySet<WaitReason['code']> = new Set([
  'waiting_for_cards',
  'reserved_for_older_task',
  'holding_reservation',
]);

/**
 * The preemptions of this pass, in queue order of their claimants; a claimant's wait reason becomes
 * `reclaiming`. `limits` holds the accounts' cards with this pass's grants.
 */
export function reclaim(
  snapshot: SchedulingSnapshot,
  candidates: readonly ReclaimCandidate[],
  pool: CardPool,
  limits: AccountLimits,
): Preemption[] {
  const running = snapshot.running ?? [];
  if (running.length === 0 || !snapshot.fair_share) return [];
  // Each lease's cards' models, for the quotas per card model (ADR 0048); none where there are none.
  const wordsOf = (lease: RunningLeaseView): string[] =>
    limits.hasModelQuotas ? pool.cardWords(lease.worker_id, lease.card_indexes) : [];
  const cap = snapshot.config.max_preemptions_per_task ?? DEFAULT_MAX_PREEMPTIONS;
  // Claimants already served: their leases in flight say so; the reason is theirs to show.
  const inFlight = new Map<string, RunningLeaseView[]>();
  for (const lease of running)
    if (lease.preempting_for && lease.preempt_overdue !== true) {
      const list = inFlight.get(lease.preempting_for);
      if (list) list.push(lease);
      else inFlight.set(lease.preempting_for, [lease]);
      // Its cards are on their way back: its account no longer holds them (else an account whose
      // borrowed cards are already being reclaimed would be reclaimed again, below its nominal share).
      if (lease.account) limits.release(lease.account, lease.card_indexes.length, wordsOf(lease));
    }
  // ... and on their way to their claimants: a claimant's account holds them already (else a second
  // task of it would ask "within" a share the first one is about to fill).
  const waiting = new Map(candidates.map((c) => [c.task_id, c]));
  for (const c of candidates) {
    const leases = inFlight.get(c.task_id);
    if (leases === undefined) continue;
    const need = c.view.req.need;
    limits.grant(c.account, need, limits.hasModelQuotas ? leases.flatMap(wordsOf).slice(0, need) : undefined);
  }
  // Cards on their way back beyond what their claimant needs (a lease is stopped whole; a claimant
  // cancelled or placed elsewhere needs none): later claimants take these before stopping anyone else.
  const spare = new Map<string, Map<number, RunningLeaseView>>();
  for (const [claimant, leases] of inFlight) {
    let keep = waiting.get(claimant)?.view.req.need ?? 0;
    for (const lease of leases)
      for (const index of [...lease.card_indexes].sort((a, b) => a - b)) {
        if (keep > 0) {
          keep--;
          continue;
        }
        addSpare(spare, lease, index);
      }
  }
  // Victims by worker, newest lease first.
  const byWorker = new Map<string, RunningLeaseView[]>();
  let open = 0;
  for (const lease of running) {
    if (!lease.preemptible || lease.preemptions >= cap || lease.preempting_for || !lease.account) continue;
    const list = byWorker.get(lease.worker_id);
    if (list) list.push(lease);
    else byWorker.set(lease.worker_id, [lease]);
    open++;
  }
  for (const list of byWorker.values())
    list.sort((a, b) => b.granted_at - a.granted_at || (a.lease_id < b.lease_id ? 1 : -1));
  const taken = new Set<string>();
  const out: Preemption[] = [];
  for (const c of candidates) {
    const already = inFlight.get(c.task_id);
    if (already) {
      c.entry.reason = reasonFor(already);
      continue;
    }
    if (open === 0 && spare.size === 0) continue;
    if (!WAITS_FOR_CARDS.has(c.entry.reason.code) || c.account === undefined) continue;
    const need = c.view.req.need;
    // With model quotas the guarantee depends on the models of the worker it would run on (bestPlace).
    if (!limits.hasModelQuotas && !limits.withinNominal(c.account, need)) continue;
    const line = new Set(limits.chain(c.account));
    const best = bestPlace(c, pool, byWorker, taken, line, limits, spare, wordsOf);
    if (best === null) continue;
    const { victims: pick, spareUsed, place } = best;
    // What it takes of the spare cards is its; what its own victims free beyond its need is spare.
    const here = spare.get(place.worker_id);
    const from = spareUsed.map((i) => here!.get(i)!);
    for (const i of spareUsed) here!.delete(i);
    if (here?.size === 0) spare.delete(place.worker_id);
    let short = need - place.open - spareUsed.length;
    // The cards it will take there: the free ones, the spare ones, then its victims'.
    const takes = limits.hasModelQuotas
      ? [...place.open_words.slice(0, need), ...pool.cardWords(place.worker_id, spareUsed)]
      : [];
    for (const lease of pick)
      for (const index of [...lease.card_indexes].sort((a, b) => a - b)) {
        if (short > 0 && place.leased.has(index)) {
          short--;
          if (limits.hasModelQuotas) takes.push(...pool.cardWords(place.worker_id, [index]));
        } else addSpare(spare, lease, index);
      }
    limits.grant(c.account, need, limits.hasModelQuotas ? takes.slice(0, need) : undefined);
    for (const lease of pick) {
      taken.add(lease.lease_id);
      open--;
      limits.release(lease.account!, lease.card_indexes.length, wordsOf(lease));
      out.push({
        task_id: lease.task_id,
        lease_id: lease.lease_id,
        lease_epoch: lease.lease_epoch,
        worker_id: lease.worker_id,
        card_indexes: lease.card_indexes,
        for_task_id: c.task_id,
        grace_seconds: lease.grace_seconds,
      });
    }
    c.entry.reason = reasonFor([...pick, ...new Set(from)]);
  }
  return out;
}

function addSpare(spare: Map<string, Map<number, RunningLeaseView>>, lease: RunningLeaseView, index: number) {
  const here = spare.get(lease.worker_id);
  if (here) here.set(index, lease);
  else spare.set(lease.worker_id, new Map([[index, lease]]));
}

/**
 * The victims on the worker where the fewest cards must stop for `c` (ties: fewer tasks, then the lower
 * worker id), with the spare cards (already on their way back) it takes there first, or null when no
 * worker has enough free, spare plus reclaimable matching cards.
 */
function bestPlace(
  c: ReclaimCandidate,
  pool: CardPool,
  byWorker: ReadonlyMap<string, RunningLeaseView[]>,
  taken: ReadonlySet<string>,
  line: ReadonlySet<string>,
  limits: AccountLimits,
  spare: ReadonlyMap<string, ReadonlyMap<number, RunningLeaseView>>,
  wordsOf: (lease: RunningLeaseView) => string[],
): { victims: RunningLeaseView[]; spareUsed: number[]; place: ReclaimPlace } | null {
  const need = c.view.req.need;
  let best: { victims: RunningLeaseView[]; spareUsed: number[]; place: ReclaimPlace } | null = null;
  let bestCards = Number.POSITIVE_INFINITY;
  for (const place of pool.reclaimPlaces(c.view, c.held)) {
    // Within its nominal share on the models it would take here (ADR 0048).
    if (limits.hasModelQuotas && !limits.withinNominal(c.account, need, place.models)) continue;
    const victims = byWorker.get(place.worker_id) ?? [];
    // Spare cards there that it can use (they still show as leased), as many as it lacks.
    const spareUsed = [...(spare.get(place.worker_id)?.keys() ?? [])]
      .filter((i) => place.leased.has(i))
      .sort((a, b) => a - b)
      .slice(0, Math.max(0, need - place.open));
    if (victims.length === 0 && spareUsed.length === 0) continue;
    /**
     * Newest first; `withinShare`: only leases no bigger than what their account borrows, so that it
     * keeps its share (a lease is stopped whole). Null when they do not free enough.
     */
    const choose = (withinShare: boolean) => {
      const pick: RunningLeaseView[] = [];
      // Cards of each account already picked here: an account is reclaimed only down to about its share.
      const picked = new Map<string, number>();
      let free = place.open + spareUsed.length;
      // Its host's room (memory, task-dir disk, CPUs): only the victims' own give more of it back, so a
      // task whose ask the victims cannot make fit is no reason to stop them.
      const room = place.room === null ? null : { ...place.room.left };
      const short = (): boolean => room !== null && ROOMS.some((name) => room[name] < place.room!.need[name]);
      let cards = 0;
      for (const lease of victims) {
        if (free >= need && !short()) break;
        if (taken.has(lease.lease_id)) continue;
        const account = lease.account!;
        if (line.has(account) || limits.chain(account).some((a) => a === c.account)) continue;
        const borrowed = limits.borrowed(
          account,
          picked.get(account) ?? 0,
          limits.hasModelQuotas ? wordsOf(lease) : undefined,
        );
        if (borrowed <= 0 || (withinShare && lease.card_indexes.length > borrowed)) continue;
        // Only its cards that the claimant can use count, and its room where the claimant's is short; a
        // lease is stopped whole.
        const usable = free >= need ? 0 : lease.card_indexes.filter((i) => place.leased.has(i)).length;
        const gives =
          room !== null &&
          ROOMS.some((name) => room[name] < place.room!.need[name] && roomOf(lease, name) > 0);
        if (usable === 0 && !gives) continue;
        pick.push(lease);
        picked.set(account, (picked.get(account) ?? 0) + lease.card_indexes.length);
        free += usable;
        if (room !== null) for (const name of ROOMS) room[name] += roomOf(lease, name);
        cards += lease.card_indexes.length;
      }
      // Cards and room both, or stopping them would not start it.
      return free < need || short() ? null : { pick, cards };
    };
    const chosen = choose(true) ?? choose(false);
    if (chosen === null) continue;
    const { pick, cards } = chosen;
    if (cards < bestCards || (cards === bestCards && best !== null && pick.length < best.victims.length)) {
      best = { victims: pick, spareUsed, place };
      bestCards = cards;
    }
  }
  return best;
}

/** A claimant's wait reason while its cards are being reclaimed. */
function reasonFor(leases: readonly RunningLeaseView[]): WaitReason {
  const worker = leases[0]!.worker_id;
  return reclaiming(
    worker,
    leases.map((l) => l.task_id),
    leases.reduce((n, l) => n + l.card_indexes.length, 0),
    Math.max(...leases.map((l) => l.grace_seconds)),
  );
}

/** The host room `lease` gives back when it ends: its memory, task-dir disk or CPUs (0 when none). */
function roomOf(lease: RunningLeaseView, name: RoomName): number {
  return lease[name] ?? 0;
}
