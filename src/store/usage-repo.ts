import type { Db } from './db.js';

/** One row of the usage ledger: what one lease's cards of one model cost its task's account. */
export interface UsageChargeRecord {
  lease_id: string;
  model: string;
  simulated: boolean;
  task_id: string;
  principal_id: string;
  account: string;
  grant_id: string | null;
  cards: number;
  started_at: number;
  ended_at: number;
  card_seconds: number;
}

/** How usage is summed: by account, by principal (name), or by card model (and simulated or not). */
export type UsageGrouping = 'account' | 'principal' | 'model';

/** One line of a usage summary. */
export interface UsageLine {
  key: string;
  simulated: boolean;
  card_seconds: number;
  leases: number;
}

interface UsageQuery {
  by: UsageGrouping;
  since: number;
  until: number;
  /** Only these accounts' charges; absent: every account. */
  accounts?: readonly string[] | undefined;
}

const GROUP_SQL: Record<UsageGrouping, string> = {
  account: 'u.account',
  principal: 'coalesce(p.name, u.principal_id)',
  model: 'u.model',
};

/**
 * The usage ledger (migration 019): written once per lease and card model when the lease's cards stop
 * being its task's; the primary key (lease, model, simulated) makes a second write of the same lease a
 * no-op, so a resent or late report, a restart or a replayed move never charges twice.
 */
export class UsageRepo {
  private readonly insertStmt;
  private readonly chargedStmt;
  private readonly totalsStmt;

  constructor(private readonly db: Db) {
    this.insertStmt = db.prepare(
      `INSERT OR IGNORE INTO usage_charges
         (lease_id, model, simulated, task_id, principal_id, account, grant_id, cards, started_at, ended_at, card_seconds)
       VALUES (@lease_id, @model, @simulated, @task_id, @principal_id, @account, @grant_id, @cards, @started_at, @ended_at, @card_seconds)`,
    );
    this.chargedStmt = db.prepare<[string], { n: number }>(
      'SELECT count(*) AS n FROM usage_charges WHERE lease_id = ?',
    );
    this.totalsStmt = db.prepare<
      [],
      { account: string; model: string; simulated: number; card_seconds: number }
    >(
      `SELECT account, model, simulated, sum(card_seconds) AS card_seconds
         FROM usage_charges GROUP BY account, model, simulated ORDER BY account, model, simulated`,
    );
  }

  /** Writes a lease's rows unless it was charged already; returns how many rows were written. */
  charge(rows: readonly UsageChargeRecord[]): number {
    let written = 0;
    for (const r of rows) written += this.insertStmt.run({ ...r, simulated: r.simulated ? 1 : 0 }).changes;
    return written;
  }

  /** Whether the lease has been charged. */
  isCharged(leaseId: string): boolean {
    return (this.chargedStmt.get(leaseId)?.n ?? 0) > 0;
  }

  /** Card-seconds of leases that ended in [since, until), grouped as asked, largest first. */
  summary(q: UsageQuery): UsageLine[] {
    const key = GROUP_SQL[q.by];
    const only = q.accounts ? `AND u.account IN (${q.accounts.map(() => '?').join(',') || "''"})` : '';
    const rows = this.db
      .prepare<unknown[], { key: string; simulated: number; card_seconds: number; leases: number }>(
        `SELECT ${key} AS key, u.simulated AS simulated, sum(u.card_seconds) AS card_seconds,
                count(DISTINCT u.lease_id) AS leases
           FROM usage_charges u LEFT JOIN principals p ON p.id = u.principal_id
          WHERE u.ended_at >= ? AND u.ended_at < ? ${only}
          GROUP BY key, u.simulated ORDER BY card_seconds DESC, key`,
      )
      .all(q.since, q.until, ...(q.accounts ?? []));
    return rows.map((r) => ({ ...r, simulated: r.simulated === 1 }));
  }

  /**
   * Card-seconds per account and minute of leases that ended at or after `since` (ms): what fair share
   * decays (src/broker/loops/snapshot.ts), bounded by accounts × minutes whatever the lease count.
   */
  recentByAccount(since: number): Array<{ account: string; minute: number; card_seconds: number }> {
    return this.db
      .prepare<[number], { account: string; minute: number; card_seconds: number }>(
        `SELECT account, ended_at / 60000 AS minute, sum(card_seconds) AS card_seconds
           FROM usage_charges WHERE ended_at >= ? GROUP BY account, minute`,
      )
      .all(since);
  }

  /**
   * The same sums per bucket of `bucketMs` from `since`: `[bucket index, key, simulated, card-seconds]`
   * rows, oldest bucket first (the dashboard's chart of usage over time).
   */
  series(
    q: UsageQuery,
    bucketMs: number,
  ): Array<{ bucket: number; key: string; simulated: boolean; card_seconds: number }> {
    const key = GROUP_SQL[q.by];
    const only = q.accounts ? `AND u.account IN (${q.accounts.map(() => '?').join(',') || "''"})` : '';
    return this.db
      .prepare<unknown[], { bucket: number; key: string; simulated: number; card_seconds: number }>(
        `SELECT (u.ended_at - ?) / ? AS bucket, ${key} AS key, u.simulated AS simulated,
                sum(u.card_seconds) AS card_seconds
           FROM usage_charges u LEFT JOIN principals p ON p.id = u.principal_id
          WHERE u.ended_at >= ? AND u.ended_at < ? ${only}
          GROUP BY bucket, key, u.simulated ORDER BY bucket, key`,
      )
      .all(q.since, bucketMs, q.since, q.until, ...(q.accounts ?? []))
      .map((r) => ({ ...r, bucket: Math.floor(r.bucket), simulated: r.simulated === 1 }));
  }

  /**
   * Card-seconds per account and card model of leases that ended in [since, until): what the budgets per
   * card model count (ADR 0048).
   */
  byAccountModel(
    since: number,
    until: number,
  ): Array<{ account: string; model: string; card_seconds: number }> {
    return this.db
      .prepare<[number, number], { account: string; model: string; card_seconds: number }>(
        `SELECT account, model, sum(card_seconds) AS card_seconds
           FROM usage_charges WHERE ended_at >= ? AND ended_at < ? GROUP BY account, model`,
      )
      .all(since, until);
  }

  /** Every account's card-seconds by model since the ledger began (the Prometheus counter). */
  totals(): Array<{ account: string; model: string; simulated: boolean; card_seconds: number }> {
    return this.totalsStmt.all().map((r) => ({ ...r, simulated: r.simulated === 1 }));
  }
}
