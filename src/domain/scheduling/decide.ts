import { AccountLimits } from './account-limits.js';
import { fairOrder, fairShareNote, fairShareWords } from './fair-order.js';
import { CardPool, type RequirementCache, type RequirementView, requirementOf } from './pool.js';
import { grantFailed, quotaExceeded, waitingForCards } from './reasons.js';
import { type ReclaimCandidate, reclaim } from './reclaim.js';
import { type NarrowedCache, withoutModels } from './requirement.js';
import type { QueuedTaskView, SchedulingDecision, SchedulingSnapshot, WaitReason } from './types.js';

/**
 * The scheduler's decision function (docs/architecture.md). Pure: it reads a snapshot and returns grants,
 * reservations and wait reasons as data. The broker applies them in one SQLite transaction with
 * compare-and-set (re-checking each card is still free) and computes lease epochs itself, so a decision
 * made on a stale snapshot is rejected, never applied.
 *
 * Vocabulary:
 *  - eligible card: derived state AVAILABLE (../card-state.ts) on an online, non-draining worker;
 *  - matching card: its model matches the task's `model` (case-insensitive, whole words, see
 *    `modelMatches`) and its memory_total is at least `min_memory_mib`;
 *  - free card: eligible, and neither granted nor reserved earlier in this pass;
 *  - aged task: waited longer than `reservation_after_seconds` since approval; it reserves free cards;
 *  - run-reserved card: cordoned by a qualification run for itself; only that run's tasks match it, and
 *    they match nothing else;
 *  - unisolated worker: its hello said `isolation: none` (tasks would run unsandboxed); under
 *    `require_isolation` it gets no task at all, as if it had no cards.
 */

/**
 * Scheduling order within an account (and of aged tasks): priority descending, then approval time
 * ascending (FIFO), then task id, so that equal tasks always come out in the same order. Across
 * accounts, fair share (./fair-order.ts).
 */
export function compareQueuedTasks(a: QueuedTaskView, b: QueuedTaskView): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.approved_at !== b.approved_at) return a.approved_at - b.approved_at;
  return a.task_id < b.task_id ? -1 : a.task_id > b.task_id ? 1 : 0;
}

/**
 * One scheduling pass at `now` (ms). Pure and deterministic: the same snapshot and `now` give the same
 * decision. Grants never share a card; each puts all of a task's cards on one worker. `requirements`
 * (optional, the caller's) keeps each task view's requirement between passes; it changes no decision.
 */
export function decide(
  snapshot: SchedulingSnapshot,
  now: number,
  requirements?: RequirementCache,
): SchedulingDecision {
  const { config } = snapshot;
  // 1. Pool: derive every card's state once and list each usable worker's free cards, so the loop
  //    below never re-derives anything (64 workers × 8 cards × 10,000 tasks must stay far under 50 ms).
  const pool = new CardPool(snapshot.workers, now, config);
  // 2. Order the queue: by priority, then accounts by fair share, each its own oldest first
  //    (./fair-order.ts; one account: priority then age, as ever).
  const agedBefore = now - config.reservation_after_seconds * 1000;
  const grantedByAccount = new Map<string, number>();
  const claimants = new Set(snapshot.reclaiming ?? []);
  const tasks = withClaimantsFirst(
    snapshot,
    claimants,
    fairOrder(snapshot.tasks, snapshot.fair_share, compareQueuedTasks, grantedByAccount),
  );
  const limit = config.max_concurrent_cards_per_owner;
  const accountLimits = new AccountLimits(snapshot.fair_share);
  // Requirements narrowed off the models whose quota an account line has filled, built once per pass.
  const narrowed: NarrowedCache = new Map();
  // Each wait reason with a model quota's words after it, once per pair (step 8).
  const withQuota = new Map<WaitReason, Map<WaitReason, WaitReason>>();
  const usedByOwner = new Map<string, number>(Object.entries(snapshot.running_cards_by_owner));

  const decision: SchedulingDecision = { grants: [], waiting: [], reservations: [], preemptions: [] };
  // Tasks left waiting for cards, for reclaim (step 9).
  const candidates: ReclaimCandidate[] = [];
  // Reasons that depend on what later tasks take are filled in at step 8, once the pass is settled.
  const unexplained: Array<{
    entry: { reason: WaitReason };
    view: RequirementView;
    reservationsBefore: number;
    account: string;
    /** The model quota it is kept off by (step 4c), for its reason. */
    fullModel?: WaitReason | undefined;
  }> = [];
  const wait = (task_id: string, reason: WaitReason): { reason: WaitReason } => {
    const entry = { task_id, position: decision.waiting.length + 1, reason };
    decision.waiting.push(entry);
    return entry;
  };

  for (const task of tasks) {
    // 3a. A task whose grants kept failing to apply waits out its backoff instead of spinning.
    if (task.grant_backoff !== undefined && task.grant_backoff.retry_at > now) {
      wait(task.task_id, grantFailed(task.grant_backoff));
      continue;
    }
    const req = requirementOf(task, requirements);
    // 3. Can it ever run where it may go? (capacity, pinned worker, online, cordons; cached per shape)
    let view = pool.viewOf(req);
    if (view.blocked !== null) {
      wait(task.task_id, view.blocked);
      continue;
    }
    // 4. Quota, counting this pass's grants. Checked before placement so an over-quota task neither
    //    takes nor reserves cards.
    const inUse = usedByOwner.get(task.owner) ?? 0;
    if (limit !== null && inUse + req.need > limit) {
      wait(task.task_id, quotaExceeded(limit, inUse, req.need));
      continue;
    }
    // 4b. The account's quotas (and those of every account above it): its cap of cards, its budget.
    const overAccount = accountLimits.check(task.account, req.need);
    if (overAccount !== null) {
      wait(task.task_id, overAccount);
      continue;
    }
    // 4c. Its account line's quotas per card model (ADR 0048): the cards of a model whose quota it has
    //     filled are not its to take; where no card of another model it may use is left, it waits for
    //     that quota. A task that may go to an H100 or an A100 goes where its account has room.
    const full = accountLimits.fullModels(task.account, req.need);
    if (full !== null) {
      view = pool.viewOf(withoutModels(req, full, narrowed));
      if (view.blocked !== null) {
        wait(task.task_id, full.reason);
        continue;
      }
    }
    // 5. Admit: best fit among free matching cards (backfill: a later task may take cards an earlier
    //    one could not use, except cards an aged task reserved in step 6, unless it will have ended
    //    before that task could start there: its time limit is a hard stop; ADR 0049).
    const endsBy =
      task.time_limit_seconds === undefined
        ? Number.POSITIVE_INFINITY
        : now +
          (task.time_limit_seconds + (config.backfill_margin_seconds ?? BACKFILL_MARGIN_SECONDS)) * 1000;
    const placed = pool.place(view, endsBy);
    const backfilled =
      placed === null && endsBy !== Number.POSITIVE_INFINITY ? pool.backfill(view, endsBy) : null;
    const grant = placed ?? backfilled;
    if (grant !== null) {
      decision.grants.push({
        task_id: task.task_id,
        ...grant,
        ...(backfilled !== null ? { backfilled: true } : {}),
      });
      usedByOwner.set(task.owner, inUse + req.need);
      const account = task.account ?? '';
      grantedByAccount.set(account, (grantedByAccount.get(account) ?? 0) + req.need);
      accountLimits.grant(
        task.account,
        req.need,
        accountLimits.hasModelQuotas ? pool.cardWords(grant.worker_id, grant.card_indexes) : undefined,
      );
      continue;
    }
    // 6. Reserve: an aged task holds the free cards of the worker where it will fit first, so a
    //    stream of smaller tasks behind it cannot starve it. So does a task whose cards are being
    //    reclaimed: what its first victims free stays free for it while the others stop (else a requeued
    //    victim would take its own cards back, be preempted again, and so on up to the cap).
    if (task.approved_at < agedBefore || claimants.has(task.task_id)) {
      // A claimant's held cards are never backfilled: its victims free theirs now, not at their limits.
      const held = pool.reserve(view, decision.waiting.length + 1, !claimants.has(task.task_id));
      if (held !== null) {
        decision.reservations.push({ task_id: task.task_id, ...held.reservation });
        const entry = wait(task.task_id, held.reason);
        // What it holds is free for it: reclaim stops only what it still lacks.
        candidates.push({
          entry,
          task_id: task.task_id,
          account: task.account,
          view,
          held: held.reservation,
        });
        continue;
      }
    }
    // 7. Requeue; its reason is explained in step 8.
    const entry = wait(task.task_id, PENDING);
    unexplained.push({
      entry,
      view,
      reservationsBefore: decision.reservations.length,
      account: task.account ?? '',
      fullModel: full?.reason,
    });
    candidates.push({ entry, task_id: task.task_id, account: task.account, view });
  }
  // 8. Explain against the settled pass, so `free` counts what is really left free, and only
  //    reservations made ahead of a task are blamed for blocking it.
  const multiAccount = new Set(snapshot.tasks.map((t) => t.account ?? '')).size > 1;
  const placeInAccount = new Map<string, number>();
  for (const { entry, view, reservationsBefore, account, fullModel } of unexplained) {
    let reason = pool.waitReason(view, reservationsBefore);
    // Kept off a model by its quota: it says so, or it would seem to wait for cards it may not take.
    if (fullModel !== undefined) {
      let byQuota = withQuota.get(reason);
      if (byQuota === undefined) {
        byQuota = new Map();
        withQuota.set(reason, byQuota);
      }
      let both = byQuota.get(fullModel);
      if (both === undefined) {
        both = { ...reason, message: `${reason.message} ${fullModel.message}` };
        byQuota.set(fullModel, both);
      }
      reason = both;
    }
    entry.reason = reason;
    // With several accounts queued, a task that waits for cards others took is told where its account
    // stands: its level and its place in the account's queue.
    if (!multiAccount || (reason.code !== 'waiting_for_cards' && reason.code !== 'reserved_for_older_task'))
      continue;
    const position = (placeInAccount.get(account) ?? 0) + 1;
    placeInAccount.set(account, position);
    const note = fairShareNote(snapshot.fair_share, account, grantedByAccount.get(account) ?? 0, position);
    if (note) entry.reason = { ...reason, message: reason.message + fairShareWords(note), fair_share: note };
  }
  // 9. Reclaim: a task still waiting for cards whose account asks within its nominal share stops
  //    preemptible tasks of borrowing accounts (./reclaim.ts); its reason becomes `reclaiming`.
  decision.preemptions = reclaim(snapshot, candidates, pool, accountLimits);
  return decision;
}

/**
 * The pass's order with the tasks that cards are being reclaimed for first (by priority, then age): the
 * cards a preemption frees go to the task they were freed for, not to whoever is next in fair order.
 */
function* withClaimantsFirst(
  snapshot: SchedulingSnapshot,
  claimants: ReadonlySet<string>,
  rest: Iterable<QueuedTaskView>,
): Generator<QueuedTaskView> {
  if (claimants.size === 0) {
    yield* rest;
    return;
  }
  yield* snapshot.tasks.filter((t) => claimants.has(t.task_id)).sort(compareQueuedTasks);
  for (const t of rest) if (!claimants.has(t.task_id)) yield t;
}

/**
 * What a backfilled task may hold its cards beyond its time limit (its start-up before the limit counts,
 * the kill grace after it, its cleanup) when the settings do not say; the master adds its kill grace and
 * its cleanup timeout. The start-up part is enforced: a backfilled run is stopped TIMED_OUT at its time
 * limit plus this from when its worker begins it (plan `stop_within_seconds`), however long it took to
 * start.
 */
export const BACKFILL_MARGIN_SECONDS = 60;

/** Placeholder until step 8 replaces it; never returned. */
const PENDING: WaitReason = waitingForCards(0, 0, 0);
