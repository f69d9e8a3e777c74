import type { Db } from './db.js';

/** One lease the scheduler asked to give its cards back (migration 022). */
export interface PreemptionRecord {
  lease_id: string;
  /** The preempted task. */
  task_id: string;
  /** The queued task the cards are reclaimed for. */
  for_task_id: string;
  worker_id: string;
  lease_epoch: number;
  grace_seconds: number;
  requested_at: number;
}

/** A live lease of a RUNNING task with what reclaim reads of it (its cards apart). */
export interface RunningLeaseFacts {
  lease_id: string;
  task_id: string;
  owner_id: string;
  worker_id: string;
  lease_epoch: number;
  granted_at: number;
  /** The spec's `preemptible` (1, 0) or null when absent. */
  preemptible: number | null;
  /** The spec's `preemption_grace_seconds`, or null. */
  grace_seconds: number | null;
  /** How often the task was asked to stop before. */
  preemptions: number;
  /** The claimant when this lease was asked to stop already, else null. */
  preempting_for: string | null;
  /** 1 when it was asked to stop longer ago than its grace and the slack allow (a worker that ignores it). */
  preempt_overdue: number;
  /** Its cards' indexes, comma-separated. */
  cards: string;
  /** The host CPUs the lease holds (`leases.cpus`); null: none asked. */
  cpus: number | null;
  /** The host memory and task-dir disk its task was given (`leases.memory_mib`, `disk_mib`), MiB; null: not recorded. */
  memory_mib: number | null;
  disk_mib: number | null;
}

/**
 * Preemptions (docs/operations.md "Borrowing and reclaim"): one row per lease the scheduler asked to
 * stop, keyed by the lease, so a second request for the same lease is a no-op. A task's rows count
 * towards the cap on how often it is preempted; a row whose lease is live, or was released within the
 * hold window, makes its claimant go first for the cards it frees.
 */
export class PreemptionsRepo {
  private readonly insertStmt;
  private readonly byLeaseStmt;
  private readonly countStmt;
  private readonly totalStmt;
  private readonly liveStmt;
  private readonly claimantsStmt;
  private readonly runningStmt;
  private readonly preemptedSecondsStmt;

  constructor(db: Db) {
    this.insertStmt = db.prepare(
      `INSERT OR IGNORE INTO preemptions
         (lease_id, task_id, for_task_id, worker_id, lease_epoch, grace_seconds, requested_at)
       VALUES (@lease_id, @task_id, @for_task_id, @worker_id, @lease_epoch, @grace_seconds, @requested_at)`,
    );
    this.byLeaseStmt = db.prepare<[string], PreemptionRecord>('SELECT * FROM preemptions WHERE lease_id = ?');
    this.totalStmt = db.prepare<[], { n: number }>('SELECT count(*) AS n FROM preemptions');
    this.countStmt = db.prepare<[string], { n: number }>(
      'SELECT count(*) AS n FROM preemptions WHERE task_id = ?',
    );
    // The preemptions of live leases (not yet released): their tasks are stopping.
    this.liveStmt = db.prepare<[], PreemptionRecord>(
      `SELECT p.* FROM preemptions p JOIN leases l ON l.id = p.lease_id WHERE l.state <> 'RELEASED'`,
    );
    // Queued claimants whose cards are being freed, or were freed since `since`. A QUARANTINED lease (its
    // worker lost mid-preemption) frees nothing until its worker returns or an operator reconciles it,
    // which may be never: its claimant is an ordinary queued task meanwhile (no first place, free to
    // reclaim elsewhere).
    // Nor does a live lease asked longer ago than its grace plus the slack (its worker ignores the cancel,
    // or its task will not die): its claimant may reclaim elsewhere rather than wait for it for ever.
    this.claimantsStmt = db.prepare<[number, number, number], { for_task_id: string }>(
      `SELECT DISTINCT p.for_task_id FROM preemptions p
         JOIN leases l ON l.id = p.lease_id
         JOIN tasks t ON t.id = p.for_task_id
        WHERE t.state = 'QUEUED'
          AND ((l.state IN ('ACTIVE', 'RELEASING') AND p.requested_at + (p.grace_seconds + ?) * 1000 >= ?)
               OR (l.state = 'RELEASED' AND l.released_at >= ?))`,
    );
    // Card-seconds charged (usage_charges) for a task's preempted leases, but one (its last run's).
    this.preemptedSecondsStmt = db.prepare<[string, string, string], { s: number }>(
      `SELECT coalesce(sum(u.card_seconds), 0) AS s FROM usage_charges u
        WHERE u.task_id = ? AND u.lease_id IN (SELECT lease_id FROM preemptions WHERE task_id = ?)
          AND u.lease_id <> ?`,
    );
    this.runningStmt = db.prepare<[{ now: number; slack: number }], RunningLeaseFacts>(
      `SELECT l.id AS lease_id, l.task_id, t.owner_id, l.worker_id, l.lease_epoch, l.created_at AS granted_at, l.cpus, l.memory_mib, l.disk_mib,
              json_extract(t.spec, '$.preemptible') AS preemptible,
              json_extract(t.spec, '$.preemption_grace_seconds') AS grace_seconds,
              (SELECT count(*) FROM preemptions q WHERE q.task_id = l.task_id) AS preemptions,
              (SELECT p.for_task_id FROM preemptions p WHERE p.lease_id = l.id) AS preempting_for,
              coalesce((SELECT p.requested_at + (p.grace_seconds + @slack) * 1000 < @now
                          FROM preemptions p WHERE p.lease_id = l.id), 0) AS preempt_overdue,
              (SELECT group_concat(c.card_index) FROM lease_cards c WHERE c.lease_id = l.id) AS cards
         FROM leases l JOIN tasks t ON t.id = l.task_id
        WHERE l.state IN ('ACTIVE', 'RELEASING')
          AND ((l.state = 'ACTIVE' AND t.state = 'RUNNING') OR l.id IN (SELECT lease_id FROM preemptions))`,
    );
  }

  /**
   * The ACTIVE leases of RUNNING tasks, and every lease being preempted that is ACTIVE or RELEASING
   * (stopping, cleaning up; not QUARANTINED, see the claimants' statement), with
   * their spec's preemption fields, how often each task was preempted and whether this lease is being
   * preempted, and whether that was longer ago than its grace plus `slackSeconds` before `now` (one
   * statement; reclaim reads it each pass where some account has a nominal share).
   */
  running(now: number, slackSeconds: number): RunningLeaseFacts[] {
    return this.runningStmt.all({ now, slack: slackSeconds });
  }

  /** Records a preemption; false when the lease was already asked. */
  request(p: PreemptionRecord): boolean {
    return this.insertStmt.run(p).changes === 1;
  }

  /** The preemption of `leaseId`, if it was asked. */
  ofLease(leaseId: string): PreemptionRecord | undefined {
    return this.byLeaseStmt.get(leaseId);
  }

  /** Every preemption asked for. */
  total(): number {
    return this.totalStmt.get()?.n ?? 0;
  }

  /** How often `taskId` was asked to stop for another task. */
  countFor(taskId: string): number {
    return this.countStmt.get(taskId)?.n ?? 0;
  }

  /**
   * The card-seconds charged for `taskId`'s preempted runs (their leases' usage rows), leaving out
   * `exceptLeaseId` (the lease of the run a caller charges itself; null: none). A standing grant's run
   * is charged for these too (src/broker/machines/standing-grant.ts settleGrantRun).
   */
  preemptedCardSeconds(taskId: string, exceptLeaseId: string | null): number {
    return this.preemptedSecondsStmt.get(taskId, taskId, exceptLeaseId ?? '')?.s ?? 0;
  }

  /** Preemptions whose leases are not yet released. */
  live(): PreemptionRecord[] {
    return this.liveStmt.all();
  }

  /**
   * Queued tasks with cards being reclaimed for them (asked at most their grace plus `slackSeconds` before
   * `now`), or reclaimed at or after `since` (ms).
   */
  claimants(since: number, now: number, slackSeconds: number): string[] {
    return this.claimantsStmt.all(slackSeconds, now, since).map((r) => r.for_task_id);
  }
}
