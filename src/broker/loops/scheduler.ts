import { decide } from '../../domain/scheduling/decide.js';
import type { RequirementCache } from '../../domain/scheduling/pool.js';
import { grantFailed } from '../../domain/scheduling/reasons.js';
import type { SchedulingDecision, SchedulingSnapshot } from '../../domain/scheduling/types.js';
import type { BrokerDeps } from '../deps.js';
import type { Fleet } from '../fleet.js';
import type { TaskObserver, TaskPlacement, WorkerLink } from '../ports.js';
import { CARDS_TOPIC, QUEUE_TOPIC } from '../topics.js';
import { PassApplier } from './pass-apply.js';
import { type FailingGrant, SnapshotReader } from './snapshot.js';

/**
 * The imperative half of scheduling (docs/architecture.md). Each pass:
 *  0. a queue with nothing to run ends the pass: there is nothing to decide;
 *  1. snapshot — queued tasks and leases from SQLite, sessions and samples from the fleet (./snapshot.ts);
 *  2. decide   — the pure `decide(snapshot, now)` returns grants and wait reasons as data;
 *  3. apply    — one transaction; each grant re-checks (compare-and-set) that its task is still QUEUED
 *                and, through the unique index on live lease cards, that its cards are still free;
 *                a grant that fails the check is skipped and the next pass decides again
 *                (./pass-apply.ts);
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
 * The notifier topics that ask for a pass (topics.ts): a task joined the queue, or cards may be usable
 * again (a lease released or quarantined, a worker or card changed, a cordon, a qualification run). A
 * task's other moves (started, exited, cleaned) change nothing a pass decides on: each used to ask for a
 * pass over the whole queue that could grant nothing.
 */
export const SCHEDULER_TOPICS: ReadonlySet<string> = new Set([QUEUE_TOPIC, CARDS_TOPIC]);

export class Scheduler implements TaskObserver {
  private queue = new Map<string, { reason: Readonly<Record<string, unknown>>; position: number }>();
  /** Tasks whose last grants failed to apply, by task id; in memory, like the queue's reasons. */
  private readonly failingGrants = new Map<string, FailingGrant>();
  private pending = false;
  private running = false;
  /** Step 1: reads the snapshot, keeping what it may between passes. */
  private readonly reader: SnapshotReader;
  /** Step 3: applies grants and preemptions. */
  private readonly applier: PassApplier;
  /** Each view's requirement, read once (decide's cache; the domain keeps no state of its own). */
  private readonly requirements: RequirementCache = new WeakMap();
  /** Durations of recent passes in ms (for the benchmark and metrics). */
  readonly passDurations: number[] = [];

  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
    link: WorkerLink,
  ) {
    this.reader = new SnapshotReader(deps, fleet);
    this.applier = new PassApplier(deps, fleet, link, () => this.requestPass());
  }

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
      if (!this.reader.queuedRows(now).some((t) => t.desired === 'run')) {
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
          for (const p of decision.preemptions) this.applier.applyPreemption(p);
        });
      // A pass that grants nothing writes nothing: no transaction (a commit is most of a small write).
      if (grants.length > 0)
        this.deps.store.transaction(() => {
          for (const grant of grants) {
            try {
              this.deps.store.transaction(() => this.applier.applyGrant(grant));
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

  /** Step 1: everything `decide` reads (./snapshot.ts). */
  snapshot(now: number): SchedulingSnapshot {
    return this.reader.read(now, this.failingGrants);
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
