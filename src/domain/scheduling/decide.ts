import type { CardSample } from '../../contracts/sample.js';
import type { ContainerEngine, IsolationMode } from '../../contracts/worker-protocol.js';
import type { CardRecords, CardStateConfig, WorkerSampling } from '../card-state.js';
import { CardPool, type RequirementView, requirementOf } from './pool.js';
import { grantFailed, quotaExceeded, waitingForCards } from './reasons.js';

/**
 * The scheduler's decision function (DESIGN §7). Pure: it reads a snapshot and returns grants,
 * reservations and wait reasons as data. The broker applies them in one SQLite transaction with
 * compare-and-set (re-checking each card is still free) and computes lease epochs itself, so a decision
 * made on a stale snapshot is rejected, never applied.
 *
 * Vocabulary:
 *  - eligible card: derived state AVAILABLE (card-state.ts) on an online, non-draining worker;
 *  - matching card: its model matches the task's `model` (case-insensitive, whole words, see
 *    `modelMatches`) and its memory_total is at least `min_memory_mib`;
 *  - free card: eligible, and neither granted nor reserved earlier in this pass;
 *  - aged task: waited longer than `reservation_after_seconds` since approval; it reserves free cards;
 *  - run-reserved card: cordoned by a qualification run for itself; only that run's tasks match it, and
 *    they match nothing else;
 *  - unisolated worker: its hello said `isolation: none` (tasks would run unsandboxed); under
 *    `require_isolation` it gets no task at all, as if it had no cards.
 */

/** A QUEUED task as the scheduler sees it. */
export interface QueuedTaskView {
  task_id: string;
  /** The principal that owns the task; quotas count per owner. */
  owner: string;
  /** Higher runs first (spec `priority`, default 0). */
  priority: number;
  /** When the approving review landed, in ms; FIFO order and reservation age count from here. */
  approved_at: number;
  cards: {
    count: number;
    model?: string | undefined;
    min_memory_mib?: number | undefined;
    /** Multi-node: cards per node; only Slurm pool workers may take it. */
    per_node?: number | undefined;
  };
  /** Pinned worker id: the task may only run there. */
  worker?: string | undefined;
  /**
   * The qualification run this task belongs to, if any: it may only run on cards reserved for that run
   * (docs/decisions/0008-qualification-cordons.md).
   */
  run_id?: string | undefined;
  /** `container` tasks only run on workers with a container engine; absent means `process`. */
  runtime?: 'process' | 'container' | undefined;
  /**
   * Set when granting this task failed to apply `failures` times in a row (a store constraint the
   * decision could not foresee); it is not granted again before `retry_at` (issue 10, row 3).
   */
  grant_backoff?: { failures: number; retry_at: number; error: string } | undefined;
  /** Named data mounts the task needs: only workers offering all of them may take it. */
  mounts?: readonly string[] | undefined;
}

/** One card of a worker as the scheduler sees it: the latest sample's fields plus our records. */
export type CardView = Pick<
  CardSample,
  | 'index'
  | 'model'
  | 'memory_used_mib'
  | 'memory_total_mib'
  | 'memory_used_pct'
  | 'health'
  | 'health_reasons'
  | 'processes'
  | 'simulated'
> &
  CardRecords & {
    /**
     * Set when a qualification run cordoned this card for itself: to every other task the card is
     * cordoned, to the run's own tasks it is a card like any other. Absent or null: no reservation.
     */
    reserved_for_run?: string | null | undefined;
    /**
     * A Slurm pool card's node (its uuid `slurm:<node>:gpu<i>`); absent on a local worker. The slot is
     * not a device our job gets, but what the sample says of it (a foreign job, a node down) is a fact
     * about that node's GPU.
     */
    node?: string | undefined;
  };

/** One enrolled worker as the scheduler sees it. */
export interface WorkerView extends WorkerSampling {
  worker_id: string;
  /** An operator is draining it: running work finishes, nothing new is granted or reserved there. */
  draining: boolean;
  /** How it runs tasks, from its latest hello: `none` means unsandboxed (UNISOLATED). */
  isolation: IsolationMode;
  /** The engine that runs `container` tasks there, or null when it cannot. */
  container_engine: ContainerEngine | null;
  /** Names of the data mounts it offers; absent means none. */
  mounts?: readonly string[] | undefined;
  /** `slurm`: its cards are a pool admitted by count (docs/decisions/0013-slurm-backend.md). */
  backend?: 'local' | 'slurm' | undefined;
  /** A Slurm pool's GPUs per node (its hello's nodes), for the shape check of multi-node tasks. */
  pool_node_gpus?: readonly number[] | undefined;
  /**
   * A Slurm pool's GPUs that our live leases' started jobs hold, per node (the executions' Slurm
   * bindings). A lease whose job has not started has no binding and is not here: it holds a slot of
   * the pool, on no known node (scheduling-nodes.ts).
   */
  pool_bound?: ReadonlyArray<{ node: string; gpus: number }> | undefined;
  cards: CardView[];
}

/** Scheduler settings from the master's config. */
export interface SchedulingConfig extends CardStateConfig {
  /** A task queued longer than this reserves free cards on the worker where it will fit first. */
  reservation_after_seconds: number;
  /** Most cards one owner may hold at once (running + granted now); null for no limit. */
  max_concurrent_cards_per_owner: number | null;
  /** `policy.require_isolation`: unisolated workers get no task. */
  require_isolation: boolean;
}

/** Everything one scheduling pass reads. */
export interface SchedulingSnapshot {
  /** The QUEUED tasks, in any order. */
  tasks: QueuedTaskView[];
  workers: WorkerView[];
  /** Cards each owner holds now through live leases. */
  running_cards_by_owner: Record<string, number>;
  config: SchedulingConfig;
}

/**
 * Why a task is still queued. Every reason carries a `message` an agent can act on.
 *  - waiting_for_cards: it fits somewhere but not enough matching cards are free on one worker (on a
 *    Slurm pool: on one node, or on enough nodes for `cards.per_node`, though the pool's count may
 *    suffice; the message then lists the nodes' free GPUs);
 *  - reserved_for_older_task: it would fit, but the free cards are held by an aged task ahead of it;
 *  - holding_reservation: it is aged and holds free cards on `worker_id` until the rest are released;
 *  - worker_offline: its pinned worker is offline or draining;
 *  - workers_offline: every worker with enough matching cards is offline or draining;
 *  - no_matching_worker: no worker it may use has enough matching cards, whatever their state;
 *  - no_container_engine: a container task, and no worker with enough matching cards has an engine;
 *  - multi_node_needs_slurm: it asks for cards across nodes (`cards.per_node`) and no Slurm worker
 *    with enough matching cards may take it;
 *  - worker_unisolated: the only workers with enough matching cards run tasks unsandboxed and the
 *    policy requires isolation;
 *  - cordoned: cordons leave fewer than `need` matching cards on every usable worker;
 *  - quota_exceeded: granting it would take its owner over the per-owner card limit;
 *  - grant_failed: its last grants failed to apply; it is retried at `retry_at` (an alert is raised).
 */
export type WaitReason =
  | { code: 'waiting_for_cards'; need: number; eligible: number; free: number; message: string }
  | { code: 'reserved_for_older_task'; task_position: number; worker_id: string; message: string }
  | { code: 'holding_reservation'; worker_id: string; held: number; need: number; message: string }
  | { code: 'worker_offline'; worker_id: string; draining: boolean; message: string }
  | { code: 'workers_offline'; need: number; offline: number; draining: number; message: string }
  | { code: 'no_matching_worker'; need: number; largest: number; message: string }
  | { code: 'no_container_engine'; need: number; without_engine: number; message: string }
  | { code: 'mount_missing'; need: number; mounts: string[]; message: string }
  | { code: 'multi_node_needs_slurm'; need: number; per_node: number; message: string }
  | { code: 'worker_unisolated'; need: number; unisolated: number; message: string }
  | { code: 'cordoned'; need: number; uncordoned: number; message: string }
  | { code: 'quota_exceeded'; limit: number; in_use: number; need: number; message: string }
  | { code: 'grant_failed'; failures: number; retry_at: number; error: string; message: string };

/** Bind a task to these cards of one worker. */
export interface Grant {
  task_id: string;
  worker_id: string;
  /** Ascending, exactly `cards.count` of them. */
  card_indexes: number[];
}

/** An aged task holds these free cards so later tasks cannot take them; it keeps waiting. */
export interface Reservation {
  task_id: string;
  worker_id: string;
  /** Ascending; fewer than the task needs (or it would have been granted). */
  card_indexes: number[];
}

/** A task left in the queue this pass. */
export interface WaitingTask {
  task_id: string;
  /** 1-based position among the tasks still queued after this pass, in scheduling order. */
  position: number;
  /** Shared between tasks with the same reason; treat it as read-only. */
  reason: WaitReason;
}

/** What one pass decided: every queued task appears exactly once in `grants` or `waiting`. */
export interface SchedulingDecision {
  grants: Grant[];
  waiting: WaitingTask[];
  reservations: Reservation[];
}

/**
 * Scheduling order: priority descending, then approval time ascending (FIFO), then task id, so that
 * equal tasks always come out in the same order.
 */
export function compareQueuedTasks(a: QueuedTaskView, b: QueuedTaskView): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.approved_at !== b.approved_at) return a.approved_at - b.approved_at;
  return a.task_id < b.task_id ? -1 : a.task_id > b.task_id ? 1 : 0;
}

/**
 * One scheduling pass at `now` (ms). Pure and deterministic: the same snapshot and `now` give the same
 * decision. Grants never share a card; each puts all of a task's cards on one worker.
 */
export function decide(snapshot: SchedulingSnapshot, now: number): SchedulingDecision {
  const { config } = snapshot;
  // 1. Pool: derive every card's state once and list each usable worker's free cards, so the loop
  //    below never re-derives anything (64 workers × 8 cards × 10,000 tasks must stay far under 50 ms).
  const pool = new CardPool(snapshot.workers, now, config);
  // 2. Order the queue.
  const tasks = [...snapshot.tasks].sort(compareQueuedTasks);
  const agedBefore = now - config.reservation_after_seconds * 1000;
  const limit = config.max_concurrent_cards_per_owner;
  const usedByOwner = new Map<string, number>(Object.entries(snapshot.running_cards_by_owner));

  const decision: SchedulingDecision = { grants: [], waiting: [], reservations: [] };
  // Reasons that depend on what later tasks take are filled in at step 8, once the pass is settled.
  const unexplained: Array<{
    entry: { reason: WaitReason };
    view: RequirementView;
    reservationsBefore: number;
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
    const req = requirementOf(task);
    // 3. Can it ever run where it may go? (capacity, pinned worker, online, cordons; cached per shape)
    const view = pool.viewOf(req);
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
    // 5. Admit: best fit among free matching cards (backfill: a later task may take cards an earlier
    //    one could not use, except cards an aged task reserved in step 6).
    const grant = pool.place(view);
    if (grant !== null) {
      decision.grants.push({ task_id: task.task_id, ...grant });
      usedByOwner.set(task.owner, inUse + req.need);
      continue;
    }
    // 6. Reserve: an aged task holds the free cards of the worker where it will fit first, so a
    //    stream of smaller tasks behind it cannot starve it.
    if (task.approved_at < agedBefore) {
      const held = pool.reserve(view, decision.waiting.length + 1);
      if (held !== null) {
        decision.reservations.push({ task_id: task.task_id, ...held.reservation });
        wait(task.task_id, held.reason);
        continue;
      }
    }
    // 7. Requeue; its reason is explained in step 8.
    const entry = wait(task.task_id, PENDING);
    unexplained.push({ entry, view, reservationsBefore: decision.reservations.length });
  }
  // 8. Explain against the settled pass, so `free` counts what is really left free, and only
  //    reservations made ahead of a task are blamed for blocking it.
  for (const { entry, view, reservationsBefore } of unexplained) {
    entry.reason = pool.waitReason(view, reservationsBefore);
  }
  return decision;
}

/** Placeholder until step 8 replaces it; never returned. */
const PENDING: WaitReason = waitingForCards(0, 0, 0);
