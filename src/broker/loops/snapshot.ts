import { budgetPeriod, DEFAULT_ACCOUNT, normalisedShares } from '../../domain/accounts/tree.js';
import { BACKFILL_MARGIN_SECONDS } from '../../domain/scheduling/decide.js';
import type {
  FairShareView,
  QueuedTaskView,
  RunningLeaseView,
  SchedulingSnapshot,
  WorkerView,
} from '../../domain/scheduling/types.js';
import type { AccountRecord } from '../../store/accounts-repo.js';
import type { LiveLeaseCard } from '../../store/leases-repo.js';
import type { QueuedTaskRow } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import type { Fleet } from '../fleet.js';
import { addModelQuotas } from './model-quota-facts.js';

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

/** A task whose grants keep failing to apply (for get_status alerts). */
export interface FailingGrant {
  task_id: string;
  failures: number;
  retry_at: number;
  error: string;
}

/**
 * Step 1 of a scheduling pass (scheduler.ts): everything `decide` reads, from SQLite and the fleet, with
 * what may be kept between passes kept here — each queued row's view, each owner's account, the decayed
 * usage (read again every FAIR_USAGE_REFRESH_MS) — so a pass reads only what moved.
 */
export class SnapshotReader {
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

  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
  ) {}

  /** The account of `owner` (remembered: it never changes). */
  account(owner: string): string {
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
  queuedRows(now: number): QueuedTaskRow[] {
    if (!(now - this.fullQueueReadAt < FULL_QUEUE_READ_INTERVAL_MS)) {
      this.deps.store.tasks.forgetQueued();
      this.fullQueueReadAt = now;
    }
    return this.deps.store.tasks.queuedForScheduling();
  }

  /** Step 1: everything `decide` reads. */
  read(now: number, failingGrants: ReadonlyMap<string, FailingGrant>): SchedulingSnapshot {
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
      const grant_backoff = failingGrants.get(t.id);
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
