import { type Policy, pinnedScripts } from '../../contracts/policy.js';
import type { ResolvedLimits } from '../../contracts/task-limits.js';
import type { Runtime } from '../../contracts/task-spec.js';
import type { ExecutionPlan, LeasedCard } from '../../contracts/worker-protocol.js';
import { budgetPeriod, DEFAULT_ACCOUNT, normalisedShares } from '../../domain/accounts/tree.js';
import { nextLeaseEpoch } from '../../domain/machines/lease.js';
import { runArgv } from '../../domain/policy/run-argv.js';
import { type HostAllowance, hostAllowance, resolveLimits } from '../../domain/policy/task-limits.js';
import { BACKFILL_MARGIN_SECONDS, decide } from '../../domain/scheduling/decide.js';
import type { RequirementCache } from '../../domain/scheduling/pool.js';
import { grantFailed } from '../../domain/scheduling/reasons.js';
import type {
  FairShareView,
  Preemption,
  QueuedTaskView,
  RunningLeaseView,
  SchedulingDecision,
  SchedulingSnapshot,
  WorkerView,
} from '../../domain/scheduling/types.js';
import type { AccountRecord } from '../../store/accounts-repo.js';
import type { LeaseRecord, LiveLeaseCard } from '../../store/leases-repo.js';
import type { QueuedTaskRow, TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import type { Fleet } from '../fleet.js';
import { cancelIfGrantLapsed } from '../grant-fence.js';
import { moveTask } from '../machines/task.js';
import type { TaskObserver, TaskPlacement, WorkerLink } from '../ports.js';
import { CARDS_TOPIC, QUEUE_TOPIC } from '../topics.js';
import { enqueueForWorker } from '../workers/link.js';
import { addModelQuotas } from './model-quota-facts.js';

/**
 * The imperative half of scheduling (docs/architecture.md). Each pass:
 *  1. snapshot — queued tasks and leases from SQLite, sessions and samples from the fleet;
 *  2. decide   — the pure `decide(snapshot, now)` returns grants and wait reasons as data;
 *  3. apply    — one transaction; each grant re-checks (compare-and-set) that its task is still QUEUED
 *                and, through the unique index on live lease cards, that its cards are still free;
 *                a grant that fails the check is skipped and the next pass decides again;
 *  4. publish  — wait reasons and positions go to memory (derived data, recomputed every pass) and
 *                the assign messages leave through the outbox once the transaction committed.
 * Passes are event-driven (approval, release, connect, sample change) and coalesced: many requests
 * in one tick run one pass. A 1 s sweep also requests one for time-based reservations.
 */
/** Backoff after a grant failed to apply: none after the first failure (a race), then 1 s doubling to 60 s. */
export function grantRetryDelayMs(failures: number): number {
  return failures <= 1 ? 0 : Math.min(60_000, 1000 * 2 ** (failures - 2));
}

/**
 * The queue is kept in memory between passes (TasksRepo.queuedForScheduling re-reads only the tasks
 * written since); as a safety net a pass reads it in full at least this often, and after any grant
 * that failed to apply.
 */
export const FULL_QUEUE_READ_INTERVAL_MS = 10_000;
/**
 * How long after a preempted lease's release its claimant still goes first in a pass (reclaim.ts): the
 * pass the release asks for comes within milliseconds; this covers a pass that was already running.
 */
export const RECLAIM_HOLD_MS = 30_000;
/**
 * Beyond a preemption's grace and the cleanup timeout, how long its claimant still waits for the lease
 * before it counts as overdue (its worker ignores the cancel, or the task will not die) and the claimant
 * may reclaim elsewhere (docs/operations.md "Borrowing and reclaim").
 */
export const PREEMPT_SLACK_SECONDS = 60;
/** How often a pass reads the accounts' decayed usage again (a lease's charge moves it a little). */
const FAIR_USAGE_REFRESH_MS = 5_000;

/**
 * The notifier topics that ask for a pass (topics.ts): a task joined the queue, or cards may be usable
 * again (a lease released or quarantined, a worker or card changed, a cordon, a qualification run). A
 * task's other moves (started, exited, cleaned) change nothing a pass decides on: each used to ask for a
 * pass over the whole queue that could grant nothing.
 */
export const SCHEDULER_TOPICS: ReadonlySet<string> = new Set([QUEUE_TOPIC, CARDS_TOPIC]);

/** A task whose grants keep failing to apply (for get_status alerts). */
export interface FailingGrant {
  task_id: string;
  failures: number;
  retry_at: number;
  error: string;
}

export class Scheduler implements TaskObserver {
  private queue = new Map<string, { reason: Readonly<Record<string, unknown>>; position: number }>();
  /** Tasks whose last grants failed to apply, by task id; in memory, like the queue's reasons. */
  private readonly failingGrants = new Map<string, FailingGrant>();
  private pending = false;
  private running = false;
  /** When the last pass read the whole queue from SQLite (see FULL_QUEUE_READ_INTERVAL_MS). */
  private fullQueueReadAt = Number.NEGATIVE_INFINITY;
  /** Each queued row's view, made once: the repo keeps an unchanged row as the same object. */
  private readonly views = new WeakMap<QueuedTaskRow, QueuedTaskView>();
  /** Each owner's account (a principal's account does not change once it is created). */
  private readonly accountOf = new Map<string, string>();
  /** Each account's maximum priority (accounts with one), read at each snapshot. */
  private maxPriority: ReadonlyMap<string, number> = new Map();
  /** Each account's decayed usage, read again at most every FAIR_USAGE_REFRESH_MS. */
  private fairUsage: { at: number; byAccount: Map<string, number> } | null = null;
  /** Each view's requirement, read once (decide's cache; the domain keeps no state of its own). */
  private readonly requirements: RequirementCache = new WeakMap();
  /** Durations of recent passes in ms (for the benchmark and metrics). */
  readonly passDurations: number[] = [];

  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
    private readonly link: WorkerLink,
  ) {}

  /** Asks for a pass soon; requests in the same tick share one pass. */
  requestPass(): void {
    if (this.pending) return;
    this.pending = true;
    setImmediate(() => {
      this.pending = false;
      try {
        this.runPass();
      } catch (err) {
        this.deps.logger.error({ err }, 'scheduling pass failed');
      }
    });
  }

  /** Runs one pass now; returns the decision (tests and the benchmark read it). */
  runPass(): SchedulingDecision {
    if (this.running) throw new Error('scheduling pass re-entered');
    this.running = true;
    const started = performance.now();
    try {
      const now = this.deps.clock.now();
      // 0. Nothing queued to run: a pass decides nothing (grants, wait reasons, reservations and reclaim
      //    all start from a queued task), so it reads nothing more. Half the passes of a busy pool find
      //    the queue empty: a lease's release asks for one (docs/performance.md "e2e").
      if (!this.queuedRows(now).some((t) => t.desired === 'run')) {
        this.queue = new Map();
        this.failingGrants.clear();
        return { grants: [], waiting: [], reservations: [], preemptions: [] };
      }
      const snapshot = this.snapshot(now);
      const decision = decide(snapshot, now, this.requirements);
      let conflicts = 0;
      // No grants while the store refuses growth (out of disk space): a task started now would only
      // write logs the master must refuse. Wait reasons are still published; the pass after recovery grants.
      const grants = this.deps.storage?.acceptsGrowth() === false ? [] : decision.grants;
      if (decision.preemptions.length > 0)
        this.deps.store.transaction(() => {
          for (const p of decision.preemptions) this.applyPreemption(p);
        });
      // A pass that grants nothing writes nothing: no transaction (a commit is most of a small write).
      if (grants.length > 0)
        this.deps.store.transaction(() => {
          for (const grant of grants) {
            try {
              this.deps.store.transaction(() =>
                this.applyGrant(grant.task_id, grant.worker_id, grant.card_indexes),
              );
              this.failingGrants.delete(grant.task_id);
            } catch (err) {
              conflicts++;
              this.grantFailed(grant.task_id, err, now);
            }
          }
        });
      const queued = new Set(snapshot.tasks.map((t) => t.task_id));
      for (const id of this.failingGrants.keys()) if (!queued.has(id)) this.failingGrants.delete(id);
      // Reasons are shared between tasks and read-only (types.ts); queueInfo hands out copies.
      const queue = new Map<string, { reason: Readonly<Record<string, unknown>>; position: number }>();
      for (const w of decision.waiting) queue.set(w.task_id, w);
      // A grant that just failed leaves its task QUEUED: it gets its reason too.
      for (const g of decision.grants) {
        const failing = this.failingGrants.get(g.task_id);
        if (failing !== undefined)
          queue.set(g.task_id, { reason: { ...grantFailed(failing) }, position: queue.size + 1 });
      }
      this.queue = queue;
      // A first failure is retried at once; later ones wait for their retry_at (see grantFailed).
      if ([...this.failingGrants.values()].some((f) => f.retry_at <= now && conflicts > 0))
        this.requestPass();
      return decision;
    } finally {
      this.running = false;
      this.passDurations.push(performance.now() - started);
      if (this.passDurations.length > 1000) this.passDurations.splice(0, 500);
    }
  }

  /**
   * A grant that failed to apply (step 3): the first failure is taken for a race and decided again at
   * once; repeated failures wait out a growing delay (the 1 s sweep requests the pass that retries), are
   * logged once per attempt rather than in a tight loop, and show in get_status as `grant_failing`.
   */
  private grantFailed(taskId: string, err: unknown, now: number): void {
    // Whatever made the grant fail, the next pass reads the queue from SQLite, not from memory.
    this.deps.store.tasks.forgetQueued();
    const failures = (this.failingGrants.get(taskId)?.failures ?? 0) + 1;
    const error = err instanceof Error ? err.message : String(err);
    const retry_at = now + grantRetryDelayMs(failures);
    this.failingGrants.set(taskId, { task_id: taskId, failures, retry_at, error });
    this.deps.logger.warn(
      { task_id: taskId, failures, retry_in_ms: retry_at - now, error },
      failures === 1 ? 'grant not applied; deciding again' : 'grant not applied again; backing off',
    );
  }

  /** Tasks whose grants failed to apply at least `atLeast` times in a row. */
  failingGrantsList(atLeast = 2): FailingGrant[] {
    return [...this.failingGrants.values()].filter((f) => f.failures >= atLeast);
  }

  /** The account of `owner` (remembered: it never changes). */
  private account(owner: string): string {
    let a = this.accountOf.get(owner);
    if (a === undefined) {
      a = this.deps.store.principals.findById(owner)?.account ?? DEFAULT_ACCOUNT;
      this.accountOf.set(owner, a);
    }
    return a;
  }

  /**
   * What fair share reads (src/domain/scheduling/fair-order.ts): each account's normalised share, its
   * usage decayed with `scheduling.fair_share_half_life_hours` (read again at most every
   * FAIR_USAGE_REFRESH_MS: usage only changes when a lease ends), and the cards its principals hold now.
   */
  private fairShare(
    now: number,
    running: Readonly<Record<string, number>>,
    workers: readonly WorkerView[],
    list: readonly AccountRecord[],
    live: readonly LiveLeaseCard[],
  ): FairShareView {
    const { store, config } = this.deps;
    const halfLifeMs = config.scheduling.fair_share_half_life_hours * 3_600_000;
    if (
      this.fairUsage === null ||
      now - this.fairUsage.at >= FAIR_USAGE_REFRESH_MS ||
      now < this.fairUsage.at
    ) {
      const byAccount = new Map<string, number>();
      // Past eight half-lives a charge counts for less than 0.4 % of itself: left out.
      for (const r of store.usage.recentByAccount(now - 8 * halfLifeMs)) {
        const age = Math.max(0, now - (r.minute * 60_000 + 30_000));
        byAccount.set(r.account, (byAccount.get(r.account) ?? 0) + r.card_seconds * 2 ** (-age / halfLifeMs));
      }
      this.fairUsage = { at: now, byAccount };
    }
    const shares = normalisedShares(list);
    const accounts: FairShareView['accounts'] = {};
    const budgets = this.budgetsUsed(now, list);
    for (const a of list)
      accounts[a.name] = {
        share: shares.get(a.name) ?? 0,
        usage: this.fairUsage.byAccount.get(a.name) ?? 0,
        running_cards: 0,
        parent: a.parent,
        nominal_cards: a.nominal_cards,
        borrowing_limit: a.borrowing_limit,
        budget:
          a.budget_card_hours === null || a.budget_period === null
            ? null
            : {
                limit_card_seconds: a.budget_card_hours * 3600,
                used_card_seconds: budgets.get(a.name) ?? 0,
                resets_at: budgetPeriod(a.budget_period, now).end,
              },
      };
    for (const [owner, cards] of Object.entries(running)) {
      const a = accounts[this.account(owner)];
      if (a) a.running_cards += cards;
    }
    // Quotas per card model (ADR 0048): read, and the cards counted by model, only where there are any.
    const modelQuotas = store.accounts.modelQuotas();
    if (modelQuotas.length > 0)
      addModelQuotas(this.deps, accounts, {
        now,
        list,
        quotas: modelQuotas,
        live,
        workers,
        accountOf: (owner) => this.account(owner),
      });
    let total_usage = 0;
    for (const a of Object.values(accounts)) total_usage += a.usage;
    return { accounts, total_cards: workers.reduce((n, w) => n + w.cards.length, 0), total_usage };
  }

  /**
   * The card-seconds each account with a budget (its subtree's leases) used in its current period: the
   * ledger's leases that ended in it, and the live leases' time in it so far (a quarantined one up to its
   * quarantine, as it will be charged). A task that started within the budget runs to its end, but no
   * new one starts once the running ones spent it.
   */
  private budgetsUsed(now: number, list: readonly AccountRecord[]): Map<string, number> {
    const out = new Map<string, number>();
    const budgeted = list.filter((a) => a.budget_period !== null && a.budget_card_hours !== null);
    if (budgeted.length === 0) return out;
    const parentOf = new Map(list.map((a) => [a.name, a.parent]));
    const byPeriod = new Map<string, Map<string, number>>();
    for (const a of budgeted) {
      const period = a.budget_period as 'day' | 'week' | 'month';
      let own = byPeriod.get(period);
      if (!own) {
        own = new Map();
        const { start } = budgetPeriod(period, now);
        for (const l of this.deps.store.usage.summary({ by: 'account', since: start, until: now + 1 }))
          own.set(l.key, (own.get(l.key) ?? 0) + l.card_seconds);
        for (const [account, seconds] of this.liveUsage(start, now))
          own.set(account, (own.get(account) ?? 0) + seconds);
        byPeriod.set(period, own);
      }
      // Its own use and every account's below it.
      let used = 0;
      for (const [name, seconds] of own) {
        for (
          let at: string | null | undefined = name, n = 0;
          at && n <= list.length;
          at = parentOf.get(at), n++
        )
          if (at === a.name) {
            used += seconds;
            break;
          }
      }
      out.set(a.name, used);
    }
    return out;
  }

  /** Card-seconds the live leases held since `start`, by their owner's account. */
  private liveUsage(start: number, now: number): Map<string, number> {
    const { store } = this.deps;
    const leases = new Map(store.leases.liveLeases().map((l) => [l.id, l]));
    const out = new Map<string, number>();
    for (const c of store.leases.liveCards()) {
      const l = leases.get(c.lease_id);
      if (!l) continue;
      const end = l.state === 'QUARANTINED' ? l.updated_at : now;
      const seconds = Math.max(0, end - Math.max(start, l.created_at)) / 1000;
      const account = this.account(c.owner_id);
      out.set(account, (out.get(account) ?? 0) + seconds);
    }
    return out;
  }

  /** The queued rows, read in full at least every FULL_QUEUE_READ_INTERVAL_MS (else only what changed). */
  private queuedRows(now: number): QueuedTaskRow[] {
    if (!(now - this.fullQueueReadAt < FULL_QUEUE_READ_INTERVAL_MS)) {
      this.deps.store.tasks.forgetQueued();
      this.fullQueueReadAt = now;
    }
    return this.deps.store.tasks.queuedForScheduling();
  }

  /** Step 1: everything `decide` reads. */
  snapshot(now: number): SchedulingSnapshot {
    const { store, config } = this.deps;
    const running: Record<string, number> = {};
    const live = store.leases.liveCards();
    for (const c of live) {
      if (c.state !== 'QUARANTINED') running[c.owner_id] = (running[c.owner_id] ?? 0) + 1;
    }
    // Qualification runs: a RUNNING run's tasks are those of its own submitter principal, and they may
    // only use the cards the run reserved (docs/decisions/0008-qualification-cordons.md).
    const runBySubmitter = new Map<string, string>();
    const reservedFor = new Map<string, string>();
    for (const run of store.qualifications.running()) {
      runBySubmitter.set(run.submitter_id, run.id);
      for (const index of run.reserved_cards) reservedFor.set(`${run.worker_id}/${index}`, run.id);
    }
    const workers = this.fleet.workerViews(store, now);
    const queued = this.queuedRows(now);
    if (reservedFor.size > 0)
      for (const w of workers)
        w.cards = w.cards.map((c) => ({
          ...c,
          reserved_for_run: reservedFor.get(`${w.worker_id}/${c.index}`) ?? null,
        }));
    // The accounts, read once a pass: their maximum priorities here, shares and quotas in fairShare.
    const accountList = store.accounts.list();
    this.maxPriority = new Map(
      accountList.filter((a) => a.max_priority !== null).map((a) => [a.name, a.max_priority as number]),
    );
    const tasks: QueuedTaskView[] = [];
    for (const t of queued) {
      if (t.desired !== 'run') continue;
      const view = queuedView(this.views, t, this.account(t.owner_id), this.maxPriority);
      const run_id = runBySubmitter.get(t.owner_id);
      const grant_backoff = this.failingGrants.get(t.id);
      // The view of an unchanged row is the same object pass after pass (`requirements` caches by it);
      // what only this pass knows makes a copy.
      tasks.push(
        run_id === undefined && grant_backoff === undefined ? view : { ...view, run_id, grant_backoff },
      );
    }
    return {
      tasks,
      workers,
      running_cards_by_owner: running,
      fair_share: this.fairShare(now, running, workers, accountList, live),
      ...this.reclaimFacts(now, accountList),
      config: {
        max_preemptions_per_task: config.scheduling.max_preemptions_per_task,
        sample_interval_ms: config.timing.sample_interval_ms,
        vram_threshold_pct: config.scheduling.vram_threshold_pct,
        reservation_after_seconds: config.scheduling.reservation_after_seconds,
        // A backfilled task holds its cards past its limit by its start-up, the kill grace and its cleanup,
        // which may take up to the cleanup timeout (an operator may raise it to an hour).
        backfill_margin_seconds:
          BACKFILL_MARGIN_SECONDS + config.timing.kill_grace_seconds + config.timing.cleanup_timeout_seconds,
        max_concurrent_cards_per_owner: config.scheduling.max_concurrent_cards_per_owner,
        require_isolation: config.policy.require_isolation,
        host_reserve: config.policy.task_limits.host_reserve,
        room_per_card: {
          memory_mib: {
            default_mib: config.policy.task_limits.per_card.memory_mib,
            max_mib: config.policy.task_limits.max_per_card.memory_mib,
          },
          disk_mib: {
            default_mib: config.policy.task_limits.per_card.disk_mib,
            max_mib: config.policy.task_limits.max_per_card.disk_mib,
          },
        },
      },
    };
  }

  /**
   * What reclaim reads (src/domain/scheduling/reclaim.ts): the running leases and the tasks whose cards
   * are being reclaimed. Nothing where no account has a nominal share (account-wide or for a card model,
   * ADR 0048): nothing can then be reclaimed, and the pass reads nothing more than before.
   */
  private reclaimFacts(
    now: number,
    accounts: readonly AccountRecord[],
  ): Pick<SchedulingSnapshot, 'running' | 'reclaiming'> {
    if (
      !accounts.some((a) => a.nominal_cards !== null) &&
      !this.deps.store.accounts.modelQuotas().some((q) => q.nominal_cards !== null)
    )
      return {};
    const { store, config } = this.deps;
    const policyPreemptible = new Set(accounts.filter((a) => a.preemptible === 1).map((a) => a.name));
    // A preemption not done within its grace, the cleanup timeout and this slack is overdue (a worker
    // that ignores the cancel): its claimant stops waiting for it (reclaim.ts).
    const slack = config.timing.cleanup_timeout_seconds + PREEMPT_SLACK_SECONDS;
    const running: RunningLeaseView[] = store.preemptions.running(now, slack).map((r) => {
      const account = this.account(r.owner_id);
      return {
        task_id: r.task_id,
        lease_id: r.lease_id,
        lease_epoch: r.lease_epoch,
        worker_id: r.worker_id,
        card_indexes: r.cards.split(',').map(Number),
        account,
        preemptible: r.preemptible === 1 || policyPreemptible.has(account),
        preemptions: r.preemptions,
        granted_at: r.granted_at,
        grace_seconds: r.grace_seconds ?? config.timing.kill_grace_seconds,
        preempting_for: r.preempting_for,
        ...(r.preempt_overdue === 1 ? { preempt_overdue: true } : {}),
        ...(r.cpus === null ? {} : { cpus: r.cpus }),
        ...(r.memory_mib === null ? {} : { memory_mib: r.memory_mib }),
        ...(r.disk_mib === null ? {} : { disk_mib: r.disk_mib }),
      };
    });
    return { running, reclaiming: store.preemptions.claimants(now - RECLAIM_HOLD_MS, now, slack) };
  }

  /**
   * Step 3 for one preemption: re-checked in this transaction (the lease still ACTIVE at its epoch, its
   * task RUNNING and not being cancelled, the claimant still QUEUED), recorded (one row per lease: a second
   * request is a no-op), audited, and a `cancel` with `preempt` to the worker. The cards stay the lease's
   * until its cleanup receipt releases it, fenced by its epoch as ever; the claimant goes first then.
   */
  private applyPreemption(p: Preemption): void {
    const { store, clock } = this.deps;
    const lease = store.leases.lease(p.lease_id);
    const task = store.tasks.stateFacts(p.task_id);
    const claimant = store.tasks.stateFacts(p.for_task_id);
    if (lease?.state !== 'ACTIVE' || lease.lease_epoch !== p.lease_epoch) return;
    if (task?.state !== 'RUNNING' || task.desired !== 'run' || claimant?.state !== 'QUEUED') return;
    const e = store.leases.executionForLease(lease.id);
    if (e === undefined) return;
    const now = clock.now();
    const recorded = store.preemptions.request({
      lease_id: lease.id,
      task_id: p.task_id,
      for_task_id: p.for_task_id,
      worker_id: lease.worker_id,
      lease_epoch: lease.lease_epoch,
      grace_seconds: Math.round(p.grace_seconds),
      requested_at: now,
    });
    if (!recorded) return;
    store.audit.append({
      at: now,
      actor: 'scheduler',
      action: 'task.preempt_requested',
      subject_type: 'task',
      subject_id: p.task_id,
      data: {
        for_task_id: p.for_task_id,
        worker_id: lease.worker_id,
        lease_epoch: lease.lease_epoch,
        cards: [...p.card_indexes],
        grace_seconds: p.grace_seconds,
      },
    });
    enqueueForWorker(this.deps, this.link, lease.worker_id, {
      type: 'cancel',
      execution_id: e.id,
      lease_epoch: lease.lease_epoch,
      reason: `preempted for task ${p.for_task_id}: its account asks within its nominal share`,
      preempt: true,
    });
  }

  /** Step 3 for one grant: lease with a fresh epoch, execution, task → ASSIGNED, assign in the outbox. */
  private applyGrant(taskId: string, workerId: string, indexes: number[]): void {
    const { store, config } = this.deps;
    const task = store.tasks.get(taskId);
    if (task?.state !== 'QUEUED' || task.desired !== 'run') return;
    // A run a standing grant approved starts only while that grant is ACTIVE and unexpired: checked in
    // this transaction, so a revoke cannot land between the check and the lease (ADR 0029).
    if (cancelIfGrantLapsed(this.deps, task, 'scheduler')) {
      store.afterCommit(() => this.requestPass());
      return;
    }
    // The task's limits on this worker, resolved once: the plan carries them, and the lease records the
    // memory promised, which the next passes count against the host (docs/operations.md "Task limits").
    const allowance = this.hostAllowanceOf(workerId);
    const limits = resolveLimits(task.spec, config.policy, allowance);
    const grant = this.recordGrant(
      taskId,
      workerId,
      this.sampledCards(workerId, indexes),
      allowance === undefined ? null : { memory_mib: limits.memory_mib, disk_mib: limits.disk_mib },
      task.spec.limits?.cpus ?? null,
    );
    moveTask(
      this.deps,
      task,
      'lease_granted',
      'scheduler',
      {},
      { worker_id: workerId, lease_epoch: grant.lease.lease_epoch, execution_id: grant.executionId },
    );
    const preemptions = store.preemptions.countFor(taskId);
    enqueueForWorker(this.deps, this.link, workerId, {
      type: 'assign',
      plan: { ...assignPlan(task, grant, config, limits), ...(preemptions > 0 ? { preemptions } : {}) },
    });
  }

  /**
   * What the worker's host can give a task (docs/security.md "The task sandbox"), from its latest hello's `host` and its
   * known cards, less the policy's reserve; undefined when its host is not known.
   */
  private hostAllowanceOf(workerId: string): HostAllowance | undefined {
    const rec = this.deps.store.workers.get(workerId);
    if (rec?.host == null) return undefined;
    return hostAllowance(rec.host, rec.cards.length, this.deps.config.policy.task_limits.host_reserve);
  }

  /** The granted cards with the uuids the worker last sampled for them. */
  private sampledCards(workerId: string, indexes: readonly number[]): LeasedCard[] {
    const sampled = this.fleet.get(workerId).cards;
    return indexes.map((index) => {
      const uuid = sampled.find((c) => c.index === index)?.uuid;
      if (!uuid) throw new Error(`card ${workerId}/${index} has no sampled uuid`);
      return { index, uuid };
    });
  }

  /** Inserts the lease (fresh epoch) and its execution, and audits the grant. */
  private recordGrant(
    taskId: string,
    workerId: string,
    cards: LeasedCard[],
    given: { memory_mib: number; disk_mib: number } | null,
    cpus: number | null,
  ): Grant {
    const { store, clock, ids } = this.deps;
    const indexes = cards.map((c) => c.index);
    const now = clock.now();
    const lease: LeaseRecord = {
      id: ids('lease'),
      task_id: taskId,
      worker_id: workerId,
      lease_epoch: nextLeaseEpoch(store.leases.epochsOf(workerId, indexes)),
      state: 'ACTIVE',
      reason: null,
      created_at: now,
      updated_at: now,
      released_at: null,
      cards,
    };
    // the unique index refuses a card that is already live
    store.leases.insertLease(lease, given, cpus);
    const executionId = ids('exec');
    const assignmentId = ids('asg');
    store.leases.insertExecution({
      id: executionId,
      task_id: taskId,
      lease_id: lease.id,
      assignment_id: assignmentId,
      worker_id: workerId,
      lease_epoch: lease.lease_epoch,
      phase: 'assigned',
      exit_code: null,
      signal: null,
      failure_reason: null,
      outputs: null,
      detail: null,
      created_at: now,
      updated_at: now,
      offline_since: null,
    });
    store.audit.append({
      at: now,
      actor: 'scheduler',
      action: 'lease.granted',
      subject_type: 'lease',
      subject_id: lease.id,
      data: {
        task_id: taskId,
        worker_id: workerId,
        lease_epoch: lease.lease_epoch,
        cards,
        execution_id: executionId,
        assignment_id: assignmentId,
      },
    });
    return { lease, executionId, assignmentId };
  }

  /** Where a task runs: its newest lease. */
  placement(taskId: string): TaskPlacement | null {
    const lease = this.deps.store.leases.latestLeaseForTask(taskId);
    if (!lease) return null;
    const sampled = this.fleet.get(lease.worker_id).cards;
    const known = sampled.length > 0 ? sampled : (this.deps.store.workers.get(lease.worker_id)?.cards ?? []);
    const simulated = known.length > 0 ? known.every((c) => c.simulated) : null;
    return { worker_id: lease.worker_id, lease_epoch: lease.lease_epoch, cards: lease.cards, simulated };
  }

  /** A queued task's reason and position from the latest pass. */
  queueInfo(taskId: string): { reason: Record<string, unknown>; position: number } | null {
    const info = this.queue.get(taskId);
    return info === undefined ? null : { reason: { ...info.reason }, position: info.position };
  }
}

/** A queued row's view for decide, from `views` when made before. */
function queuedView(
  views: WeakMap<QueuedTaskRow, QueuedTaskView>,
  t: QueuedTaskRow,
  account: string,
  maxPriority: ReadonlyMap<string, number>,
): QueuedTaskView {
  let view = views.get(t);
  const max = maxPriority.get(account);
  const priority = max === undefined ? t.priority : Math.min(t.priority, max);
  if (view !== undefined && view.priority !== priority) view = undefined;
  if (view === undefined) {
    view = {
      task_id: t.id,
      owner: t.owner_id,
      account,
      // A task approved before its account's maximum was lowered queues at the maximum.
      priority,
      approved_at: t.approved_at,
      cards: {
        count: t.spec.cards.count,
        model: t.spec.cards.model,
        min_memory_mib: t.spec.cards.min_memory_mib,
        per_node: t.spec.cards.per_node,
        mig_profile: t.spec.cards.mig_profile,
        allow_mig: t.spec.cards.allow_mig,
      },
      worker: t.spec.worker,
      runtime: t.runtime_kind,
      mounts: t.mounts,
      limits: t.spec.limits,
      time_limit_seconds: t.spec.time_limit_seconds,
    };
    views.set(t, view);
  }
  return view;
}

/** A recorded grant: the lease and the ids of its execution and assignment. */
interface Grant {
  readonly lease: LeaseRecord;
  readonly executionId: string;
  readonly assignmentId: string;
}

/** The `assign` plan of a granted task. */
function assignPlan(
  task: TaskRecord,
  grant: Grant,
  config: BrokerDeps['config'],
  limits: ResolvedLimits,
): ExecutionPlan {
  return {
    task_id: task.id,
    execution_id: grant.executionId,
    assignment_id: grant.assignmentId,
    lease_epoch: grant.lease.lease_epoch,
    cards: grant.lease.cards,
    spec: task.spec,
    spec_digest: task.spec_digest,
    kill_grace_seconds: config.timing.kill_grace_seconds,
    cleanup_timeout_seconds: config.timing.cleanup_timeout_seconds,
    vram_clean_pct: config.scheduling.vram_threshold_pct,
    // The limits as the policy resolves them, within what this worker's host can give (its share per card
    // for the defaults).
    ...sandboxOfPlan(task.spec.runtime, config.policy, limits),
    argv: runArgv(task.spec, config.policy),
    ...(task.spec.limits?.cpus === undefined ? {} : { cpus: task.spec.limits.cpus }),
  };
}

/**
 * What the plan carries for the worker's sandbox: the policy's hidden paths, the task's resolved limits
 * (src/domain/policy/task-limits.ts) and, by runtime, the host
 * file pins (a process) or the digest the image must have (a container listed in policy.images with a
 * digest; its argv runs inside the image, so no host file is pinned).
 */
export function sandboxOfPlan(
  runtime: Runtime,
  policy: Policy,
  limits: ResolvedLimits,
): Pick<ExecutionPlan, 'pins' | 'hidden_paths' | 'image_digest' | 'limits'> {
  const hidden_paths = policy.hidden_paths;
  if (runtime.kind === 'process') return { pins: pinnedFiles(runtime.argv, policy), hidden_paths, limits };
  const digest = policy.images.find((i) => i.ref === runtime.image)?.digest;
  return { pins: [], hidden_paths, limits, ...(digest !== undefined ? { image_digest: digest } : {}) };
}

/** The policy's sha256 pins that apply to this argv: the executable's, and an allowed script's. */
export function pinnedFiles(
  argv: readonly string[],
  policy: Policy,
): Array<{ path: string; sha256: string }> {
  const [exe, script] = argv;
  const pins: Array<{ path: string; sha256: string }> = [];
  const rule = policy.executables.find((e) => e.path === exe);
  if (rule?.sha256) pins.push({ path: rule.path, sha256: rule.sha256 });
  const scriptRule = pinnedScripts(policy.scripts).find((s) => s.interpreter === exe && s.script === script);
  if (scriptRule) pins.push({ path: scriptRule.script, sha256: scriptRule.sha256 });
  return pins;
}
