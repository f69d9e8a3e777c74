import type { CardSample } from '../../contracts/sample.js';
import type { HostReserve, HostResources } from '../../contracts/task-limits.js';
import type { ContainerEngine, IsolationMode } from '../../contracts/worker-protocol.js';
import type { CardRecords, CardStateConfig, WorkerSampling } from '../machines/card-state.js';
import type { HostAsk } from '../policy/task-limits.js';

/**
 * The scheduler's vocabulary as types: the snapshot one pass reads (tasks, workers, cards, settings)
 * and the decision it returns (grants, reservations, wait reasons). decide.ts, pool.ts, nodes.ts and
 * reasons.ts all read them from here; the words are defined in decide.ts's file comment.
 */

/** A QUEUED task as the scheduler sees it. */
export interface QueuedTaskView {
  task_id: string;
  /** The principal that owns the task; quotas count per owner. */
  owner: string;
  /** The owner's account: fair share orders the queue across accounts (./fair-order.ts). */
  account?: string | undefined;
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
    /** MIG slices of this profile only (ADR 0046). */
    mig_profile?: string | undefined;
    /** One MIG slice may stand for the one card (the smallest that fits is taken first). */
    allow_mig?: boolean | undefined;
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
   * decision could not foresee); it is not granted again before `retry_at` (docs/state-machines.md).
   */
  grant_backoff?: { failures: number; retry_at: number; error: string } | undefined;
  /** Named data mounts the task needs: only workers offering all of them may take it. */
  mounts?: readonly string[] | undefined;
  /**
   * The spec's `time_limit_seconds` (a hard stop): a task that will have ended before an aged task's
   * reservation can start may take the cards it holds (backfill, ADR 0049). Absent: never backfilled.
   */
  time_limit_seconds?: number | undefined;
  /**
   * What the spec asks of memory, /tmp, /dev/shm and disk (its `limits`): only a worker whose host can
   * give them may take it (docs/security.md "The task sandbox").
   */
  limits?: { readonly [K in HostAsk]?: number | undefined } | undefined;
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
  | 'mig_mode'
  | 'mig'
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
    /**
     * When `leased`: when the time limit of the task holding it stops that task (its start plus its
     * `time_limit_seconds`; the limit is a hard stop). An aged task waiting for this card cannot start
     * before then, so a task that will have ended by then may use the cards it holds (backfill, pool.ts,
     * ADR 0049). Absent: not known (a task not started yet), so nothing is promised on it.
     */
    lease_ends_by?: number | undefined;
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
  /** Its host's RAM, CPUs and data-dir disk (its hello); absent or null: not known, nothing ruled out. */
  host?: HostResources | null | undefined;
  /** Memory its live leases' tasks were given (their resolved `memory_mib`), in MiB; absent: none. */
  memory_committed_mib?: number | undefined;
  /** Task-dir disk its live leases' tasks were given (their resolved `disk_mib`), in MiB; absent: none. */
  disk_committed_mib?: number | undefined;
  /** CPUs its live leases' tasks asked for (`limits.cpus`); absent: none. */
  cpus_committed?: number | undefined;
  /** `slurm`: its cards are a pool admitted by count (docs/decisions/0013-slurm-backend.md). */
  backend?: 'local' | 'slurm' | undefined;
  /** A Slurm pool's GPUs per node (its hello's nodes), for the shape check of multi-node tasks. */
  pool_node_gpus?: readonly number[] | undefined;
  /**
   * A Slurm pool's GPUs that our live leases' started jobs hold, per node (the executions' Slurm
   * bindings). A lease whose job has not started has no binding and is not here: it holds a slot of
   * the pool, on no known node (nodes.ts).
   */
  pool_bound?: ReadonlyArray<{ node: string; gpus: number }> | undefined;
  cards: CardView[];
}

/** Scheduler settings from the master's config. */
export interface SchedulingConfig extends CardStateConfig {
  /** A task queued longer than this reserves free cards on the worker where it will fit first. */
  reservation_after_seconds: number;
  /**
   * What a backfilled task may hold its cards beyond its time limit (its start-up before the limit
   * counts, the kill grace, its cleanup), ADR 0049; absent: BACKFILL_MARGIN_SECONDS (decide.ts).
   */
  backfill_margin_seconds?: number | undefined;
  /** Most cards one owner may hold at once (running + granted now); null for no limit. */
  max_concurrent_cards_per_owner: number | null;
  /** `policy.require_isolation`: unisolated workers get no task. */
  require_isolation: boolean;
  /** A task preempted this often is never preempted again (it runs to its end); absent: 3. */
  max_preemptions_per_task?: number | undefined;
  /** `policy.task_limits.host_reserve`: what each host keeps for itself; tasks share the rest. */
  host_reserve?: HostReserve | undefined;
  /**
   * `policy.task_limits`' memory and disk per card (default and maximum): what a task asking for none
   * would be given, to count against its host's room left. Absent: the contract's defaults.
   */
  room_per_card?:
    | {
        readonly memory_mib: { readonly default_mib: number; readonly max_mib: number };
        readonly disk_mib: { readonly default_mib: number; readonly max_mib: number };
      }
    | undefined;
}

/**
 * A live lease of a RUNNING task, or one being preempted in any state until it is released, as reclaim
 * sees it (./reclaim.ts).
 */
export interface RunningLeaseView {
  task_id: string;
  lease_id: string;
  lease_epoch: number;
  worker_id: string;
  /** Its cards on the worker. */
  card_indexes: readonly number[];
  /** Its task's owner's account; absent: none known (never reclaimed). */
  account?: string | undefined;
  /** Its spec says `preemptible: true`, or its account's policy makes every task of it preemptible. */
  preemptible: boolean;
  /** How often its task was asked to stop for another task before. */
  preemptions: number;
  /** When the lease was granted (ms): the newest is preempted first. */
  granted_at: number;
  /** SIGTERM to SIGKILL when it is preempted: its spec's `preemption_grace_seconds`, else the kill grace. */
  grace_seconds: number;
  /** The host CPUs it holds (its spec's `limits.cpus`, the lease's `cpus`); absent or 0: none. */
  cpus?: number | undefined;
  /** The host memory and task-dir disk its task was given, MiB (the lease's); absent: none counted. */
  memory_mib?: number | undefined;
  disk_mib?: number | undefined;
  /** The queued task its cards are being reclaimed for, once asked; null or absent: not asked. */
  preempting_for?: string | null | undefined;
  /**
   * Asked longer ago than its grace and the slack allow (its worker ignores the cancel): never a victim
   * again, but no longer in flight for its claimant, who may reclaim elsewhere.
   */
  preempt_overdue?: boolean | undefined;
}

/** Everything one scheduling pass reads. */
export interface SchedulingSnapshot {
  /** The QUEUED tasks, in any order. */
  tasks: QueuedTaskView[];
  workers: WorkerView[];
  /** Cards each owner holds now through live leases. */
  running_cards_by_owner: Record<string, number>;
  /** Each account's share, decayed usage and cards held now; absent: one account for everyone. */
  fair_share?: FairShareView | undefined;
  /** Live leases of RUNNING tasks, for reclaim (./reclaim.ts); absent: nothing is ever preempted. */
  running?: readonly RunningLeaseView[] | undefined;
  /**
   * Queued tasks whose cards are being reclaimed (or were, a moment ago): they go first this pass, so
   * the cards a preemption frees reach the task they were freed for.
   */
  reclaiming?: readonly string[] | undefined;
  config: SchedulingConfig;
}

/** How an account stands at the end of a pass, for a waiting task's reason (get_queue, get_task). */
export interface FairShareNote {
  account: string;
  /** Its level (see ./fair-order.ts): below another account's, it is served first. */
  level: number;
  /** Cards it holds, with this pass's grants. */
  held_cards: number;
  /** Its share of the pool, in cards. */
  share_cards: number;
  /** This task's place among its account's waiting tasks (1: next). */
  position_in_account: number;
}

/** One account as a pass sees it (fair share and quotas). */
export interface AccountView {
  share: number;
  usage: number;
  /** Cards its own principals hold now (not its children's). */
  running_cards: number;
  /** Its parent account (quotas of every account above apply too); absent: none known. */
  parent?: string | null | undefined;
  /** Cards guaranteed when it asks; with `borrowing_limit`, the most its subtree may hold. */
  nominal_cards?: number | null | undefined;
  borrowing_limit?: number | null | undefined;
  /** Its card-hour budget this period: the limit, what leases ended in the period used, when it resets. */
  budget?: { limit_card_seconds: number; used_card_seconds: number; resets_at: number } | null | undefined;
  /** Its quotas per card model (ADR 0048), beside the account-wide ones above; absent: none. */
  model_quotas?: readonly ModelQuotaView[] | undefined;
  /**
   * Cards its own principals hold now (not its children's), by the card's model as its worker reports
   * it; filled only where some account has a model quota. Absent: none.
   */
  running_by_model?: Readonly<Record<string, number>> | undefined;
}

/** One account's quota for the cards of one model, as a pass sees it (ADR 0048). */
export interface ModelQuotaView {
  /** As the operator named it ("H100"), for messages. */
  model: string;
  /** Its key's words padded with one space each side (" h100 "): it covers cards whose model holds them. */
  words: string;
  /** Cards of the model guaranteed when it asks; with `borrowing_limit`, the most its subtree may hold. */
  nominal_cards: number | null;
  borrowing_limit: number | null;
  /** Its card-hour budget this period for cards of the model (its subtree's use), as an account's. */
  budget: { limit_card_seconds: number; used_card_seconds: number; resets_at: number } | null;
}

/** What fair share needs of the accounts (./fair-order.ts). */
export interface FairShareView {
  /** By account name: its normalised share (0..1], its decayed card-seconds, the cards it holds now. */
  accounts: Record<string, AccountView>;
  /** Cards of every worker in the snapshot. */
  total_cards: number;
  /** Every account's decayed usage summed (the caller has it); absent: summed from `accounts`. */
  total_usage?: number | undefined;
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
 *  - limits_exceed_host: its spec asks for more memory, /tmp, /dev/shm or disk than the host of any
 *    worker with enough matching cards can give (its RAM or disk less the operator's reserve);
 *  - waiting_for_host_room: enough matching cards are free on a worker, but its host has too little
 *    memory, disk or CPUs left that no running task there was promised (docs/operations.md "Task limits");
 *  - multi_node_needs_slurm: it asks for cards across nodes (`cards.per_node`) and no Slurm worker
 *    with enough matching cards may take it;
 *  - worker_unisolated: the only workers with enough matching cards run tasks unsandboxed and the
 *    policy requires isolation;
 *  - cordoned: cordons leave fewer than `need` matching cards on every usable worker;
 *  - quota_exceeded: granting it would take its owner over the per-owner card limit;
 *  - account_quota_exceeded: its account, or one above, would hold more than nominal + borrowing limit
 *    (with `model`: of that card model, and no card of a model with room is left for it);
 *  - account_budget_exhausted: its account, or one above, spent its card-hour budget this period (with
 *    `model`: its budget for that card model);
 *  - grant_failed: its last grants failed to apply; it is retried at `retry_at` (an alert is raised);
 *  - reclaiming: its account asks within its nominal share and no cards are free, so preemptible tasks
 *    of accounts borrowing beyond theirs are being stopped on `worker_id` to give it their cards.
 */
export type WaitReason =
  | {
      code: 'waiting_for_cards';
      need: number;
      eligible: number;
      free: number;
      message: string;
      /** With several accounts queued: where the task's account stands (./fair-order.ts). */
      fair_share?: FairShareNote;
    }
  | {
      code: 'reserved_for_older_task';
      task_position: number;
      worker_id: string;
      message: string;
      fair_share?: FairShareNote;
    }
  | { code: 'holding_reservation'; worker_id: string; held: number; need: number; message: string }
  | { code: 'worker_offline'; worker_id: string; draining: boolean; message: string }
  | { code: 'workers_offline'; need: number; offline: number; draining: number; message: string }
  | { code: 'no_matching_worker'; need: number; largest: number; message: string }
  | { code: 'no_container_engine'; need: number; without_engine: number; message: string }
  | { code: 'mount_missing'; need: number; mounts: string[]; message: string }
  | { code: 'limits_exceed_host'; need: number; limit: string; ask: number; most: number; message: string }
  | {
      code: 'waiting_for_host_room';
      resource: 'memory_mib' | 'disk_mib';
      worker_id: string;
      need_mib: number;
      free_mib: number;
      message: string;
    }
  | {
      code: 'waiting_for_host_room';
      resource: 'cpus';
      worker_id: string;
      /** The CPUs it asked for (`limits.cpus`). */
      need_cpus: number;
      /** The CPUs of that host no running task asked for (less the reserve). */
      free_cpus: number;
      message: string;
    }
  | { code: 'multi_node_needs_slurm'; need: number; per_node: number; message: string }
  | { code: 'worker_unisolated'; need: number; unisolated: number; message: string }
  | { code: 'cordoned'; need: number; uncordoned: number; message: string }
  | { code: 'quota_exceeded'; limit: number; in_use: number; need: number; message: string }
  | {
      code: 'account_quota_exceeded';
      account: string;
      /** Set when the limit is the account's quota for one card model (ADR 0048). */
      model?: string;
      limit: number;
      nominal: number;
      borrowing_limit: number;
      held: number;
      need: number;
      message: string;
    }
  | {
      code: 'account_budget_exhausted';
      account: string;
      /** Set when the budget is the account's budget for one card model (ADR 0048). */
      model?: string;
      budget_card_hours: number;
      used_card_hours: number;
      resets_at: number;
      message: string;
    }
  | { code: 'grant_failed'; failures: number; retry_at: number; error: string; message: string }
  | {
      code: 'reclaiming';
      worker_id: string;
      /** The tasks asked to give their cards back for this one. */
      preempted: string[];
      /** Cards they hold there. */
      cards: number;
      /** The longest grace among them, in seconds: the cards are free by then, plus their cleanup. */
      grace_seconds: number;
      message: string;
    };

/** Bind a task to these cards of one worker. */
export interface Grant {
  task_id: string;
  worker_id: string;
  /** Ascending, exactly `cards.count` of them. */
  card_indexes: number[];
  /**
   * Set when the task took cards an aged task holds back (backfill, ADR 0049): the master then enforces
   * its time limit plus the start-up allowance from the grant, so the promise holds however long it
   * takes to start.
   */
  backfilled?: true;
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

/** Stop this RUNNING task's lease (SIGTERM, grace, SIGKILL) to give its cards to `for_task_id`. */
export interface Preemption {
  task_id: string;
  lease_id: string;
  lease_epoch: number;
  worker_id: string;
  card_indexes: readonly number[];
  /** The queued task whose account asks within its nominal share. */
  for_task_id: string;
  grace_seconds: number;
}

/** What one pass decided: every queued task appears exactly once in `grants` or `waiting`. */
export interface SchedulingDecision {
  grants: Grant[];
  waiting: WaitingTask[];
  reservations: Reservation[];
  /** Leases to preempt for tasks asking within their accounts' nominal shares (./reclaim.ts). */
  preemptions: Preemption[];
}
