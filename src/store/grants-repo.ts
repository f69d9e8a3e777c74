import { currentScope } from '../contracts/standing-grant.js';
import type { GrantState, StandingGrant } from '../domain/grants/grant.js';
import type { Db } from './db.js';

/** A standing grant row (migration 013): immutable but for its state, decider and counters. */
export interface GrantRecord extends StandingGrant {
  created_by: string;
  decided_by: string | null;
  base_revision_id: string;
  supersedes: string | null;
  /** The requester's reason: untrusted text. */
  reason: string;
  decision_comment: string | null;
  /** Budgets (runs, card_hours, ttl) whose 80 % alert was raised. */
  alerted: string[];
  created_at: number;
  updated_at: number;
  decided_at: number | null;
}

/** One run a grant approved. */
export interface GrantRunRecord {
  grant_id: string;
  task_id: string;
  proposal_id: string;
  revision_id: string;
  cards: number;
  card_seconds_reserved: number;
  card_seconds_charged: number | null;
  outcome: 'COMPLETED' | 'FAILED' | 'CANCELLED' | null;
  /** Matched clauses and the budget before/after. */
  receipt: Record<string, unknown>;
  created_at: number;
  settled_at: number | null;
}

interface GrantRow extends Omit<GrantRecord, 'scope' | 'alerted'> {
  scope: string;
  alerted: string;
}

const toGrant = (r: GrantRow): GrantRecord => ({
  ...r,
  scope: currentScope(JSON.parse(r.scope) as Parameters<typeof currentScope>[0]),
  alerted: JSON.parse(r.alerted) as string[],
});

/** The columns an update may write (the frozen trigger refuses the others). */
const MUTABLE = [
  'state',
  'decided_by',
  'decision_comment',
  'decided_at',
  'runs_used',
  'card_seconds_charged',
  'card_seconds_reserved',
  'running',
  'consecutive_failures',
  'alerted',
  'updated_at',
] as const;

/** Standing grants and the runs they approved. */
export class GrantsRepo {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      pendingBy: db.prepare<[string], { count: number; bytes: number }>(
        `SELECT count(*) AS count,
                coalesce(sum(length(CAST(scope AS BLOB)) + length(CAST(reason AS BLOB))), 0) AS bytes
           FROM standing_grants WHERE created_by = ? AND state = 'REQUESTED'`,
      ),
      insert: db.prepare(
        `INSERT INTO standing_grants (id, grantee_id, created_by, decided_by, base_revision_id, supersedes, scope,
           reason, max_runs, max_card_seconds, concurrency, breaker_k, expires_at, state, decision_comment,
           created_at, updated_at, decided_at)
         VALUES (@id, @grantee_id, @created_by, @decided_by, @base_revision_id, @supersedes, @scope, @reason,
           @max_runs, @max_card_seconds, @concurrency, @breaker_k, @expires_at, @state, @decision_comment,
           @created_at, @updated_at, @decided_at)`,
      ),
      get: db.prepare<[string], GrantRow>('SELECT * FROM standing_grants WHERE id = ?'),
      update: db.prepare(
        `UPDATE standing_grants SET ${MUTABLE.map((c) => `${c} = @${c}`).join(', ')}
          WHERE id = @id AND state = @expected_state AND runs_used = @expected_runs
            AND running = @expected_running AND card_seconds_reserved = @expected_reserved`,
      ),
      activeOf: db.prepare<[string], GrantRow>(
        "SELECT * FROM standing_grants WHERE grantee_id = ? AND state = 'ACTIVE' ORDER BY created_at, id",
      ),
      liveOf: db.prepare<[string], GrantRow>(
        `SELECT * FROM standing_grants WHERE grantee_id = ? AND state IN ('ACTIVE','SUSPENDED')
          ORDER BY state = 'SUSPENDED', created_at, id`,
      ),
      list: db.prepare<[{ p: string | null; s: string | null; before: string; n: number }], GrantRow>(
        `SELECT * FROM standing_grants
          WHERE (@p IS NULL OR grantee_id = @p OR created_by = @p) AND (@s IS NULL OR state = @s) AND id < @before
          ORDER BY id DESC LIMIT @n`,
      ),
      expired: db.prepare<[number, number], GrantRow>(
        `SELECT * FROM standing_grants WHERE state IN ('REQUESTED','ACTIVE','SUSPENDED') AND expires_at <= ?
          ORDER BY expires_at LIMIT ?`,
      ),
      live: db.prepare<[], GrantRow>("SELECT * FROM standing_grants WHERE state IN ('ACTIVE','SUSPENDED')"),
      insertRun: db.prepare(
        `INSERT INTO standing_grant_runs (grant_id, task_id, proposal_id, revision_id, cards, card_seconds_reserved,
           receipt, created_at) VALUES (@grant_id, @task_id, @proposal_id, @revision_id, @cards,
           @card_seconds_reserved, @receipt, @created_at)`,
      ),
      runOfTask: db.prepare<[string], GrantRunRow>('SELECT * FROM standing_grant_runs WHERE task_id = ?'),
      runs: db.prepare<[string], GrantRunRow>(
        'SELECT * FROM standing_grant_runs WHERE grant_id = ? ORDER BY created_at, task_id',
      ),
      settleRun: db.prepare(
        `UPDATE standing_grant_runs SET card_seconds_charged = @charged, outcome = @outcome, settled_at = @at
          WHERE task_id = @task_id AND settled_at IS NULL`,
      ),
      insertAutoReview: db.prepare(
        `INSERT INTO reviews (id, proposal_id, revision_id, revision_digest, reviewer_id, decision, comments,
           created_at, grant_id)
         VALUES (@id, @proposal_id, @revision_id, @revision_digest, @reviewer_id, 'APPROVE', @comments,
           @created_at, @grant_id)`,
      ),
      openRuns: db.prepare<[string], GrantRunRow>(
        'SELECT * FROM standing_grant_runs WHERE grant_id = ? AND settled_at IS NULL ORDER BY created_at',
      ),
    };
  }

  /** Inserts a new grant (counters start at zero). */
  insert(g: GrantRecord): void {
    this.s.insert.run({ ...g, scope: JSON.stringify(g.scope) });
  }

  /** One grant. */
  get(id: string): GrantRecord | undefined {
    const r = this.s.get.get(id);
    return r ? toGrant(r) : undefined;
  }

  /**
   * Compare-and-set on the state and the counters the caller read: false when another writer moved
   * the grant first (the caller's transaction then re-reads or refuses).
   */
  update(next: GrantRecord, expected: GrantRecord): boolean {
    const row: Record<string, unknown> = { id: next.id };
    for (const c of MUTABLE) row[c] = c === 'alerted' ? JSON.stringify(next.alerted) : next[c];
    return (
      this.s.update.run({
        ...row,
        expected_state: expected.state,
        expected_runs: expected.runs_used,
        expected_running: expected.running,
        expected_reserved: expected.card_seconds_reserved,
      }).changes === 1
    );
  }

  /** The grantee's ACTIVE grants, oldest first (the order confirm tries them in). */
  activeOf(granteeId: string): GrantRecord[] {
    return this.s.activeOf.all(granteeId).map(toGrant);
  }

  /** The grantee's ACTIVE grants oldest first, then its SUSPENDED ones (confirm names why they fail). */
  liveOf(granteeId: string): GrantRecord[] {
    return this.s.liveOf.all(granteeId).map(toGrant);
  }

  /** Grants newest first, of a principal (as grantee or requester) or all; by state. */
  list(q: { principal_id: string | null; state: GrantState | null; before_id?: string; limit: number }) {
    return this.s.list
      .all({ p: q.principal_id, s: q.state, before: q.before_id ?? '\uffff', n: q.limit })
      .map(toGrant);
  }

  /**
   * How many REQUESTED grants `principalId` made, and their scope and reason in bytes (the pending-request
   * quota, src/domain/retention/grant-quota.ts). No index on created_by: a scan of the grants, which the quota keeps
   * from growing fast (decided ones stay, at the pace reviewers decide).
   */
  pendingRequestedBy(principalId: string): { count: number; bytes: number } {
    return this.s.pendingBy.get(principalId) ?? { count: 0, bytes: 0 };
  }

  /** Undecided or live grants past their expiry, at most `limit`. */
  expired(now: number, limit: number): GrantRecord[] {
    return this.s.expired.all(now, limit).map(toGrant);
  }

  /** ACTIVE and SUSPENDED grants (for the budget gauge). */
  live(): GrantRecord[] {
    return this.s.live.all().map(toGrant);
  }

  /** Records a run the grant approved. */
  insertRun(r: Omit<GrantRunRecord, 'card_seconds_charged' | 'outcome' | 'settled_at'>): void {
    this.s.insertRun.run({ ...r, receipt: JSON.stringify(r.receipt) });
  }

  /** The grant run of a task, if a grant approved it. */
  runOfTask(taskId: string): GrantRunRecord | undefined {
    const r = this.s.runOfTask.get(taskId);
    return r ? toRun(r) : undefined;
  }

  /** Every run a grant approved, oldest first. */
  runs(grantId: string): GrantRunRecord[] {
    return this.s.runs.all(grantId).map(toRun);
  }

  /** Runs not settled yet. */
  openRuns(grantId: string): GrantRunRecord[] {
    return this.s.openRuns.all(grantId).map(toRun);
  }

  /**
   * The review row of an auto-approval: decision APPROVE, `grant_id` set, and `reviewer_id` the person
   * who decided the grant (the human decision behind the run).
   */
  insertAutoReview(r: {
    id: string;
    proposal_id: string;
    revision_id: string;
    revision_digest: string;
    reviewer_id: string;
    comments: string;
    created_at: number;
    grant_id: string;
  }): void {
    this.s.insertAutoReview.run(r);
  }

  /** Settles a run once; false when it was settled already. */
  settleRun(taskId: string, charged: number, outcome: GrantRunRecord['outcome'], at: number): boolean {
    return this.s.settleRun.run({ task_id: taskId, charged, outcome, at }).changes === 1;
  }
}

interface GrantRunRow extends Omit<GrantRunRecord, 'receipt'> {
  receipt: string;
}

const toRun = (r: GrantRunRow): GrantRunRecord => ({
  ...r,
  receipt: JSON.parse(r.receipt) as Record<string, unknown>,
});
