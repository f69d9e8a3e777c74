import type { TaskSpec } from '../contracts/task-spec.js';
import type { ProposalState, ReviewDecision } from '../domain/machines/proposal.js';
import type { Finding } from '../domain/policy/evaluate.js';
import type { Db } from './db.js';
import { selectNewestFirst } from './newest-first.js';

/** A proposal row. */
export interface ProposalRecord {
  id: string;
  owner_id: string;
  state: ProposalState;
  current_revision_id: string;
  task_id: string | null;
  created_at: number;
  updated_at: number;
  expires_at: number | null;
}

/** An immutable revision. */
export interface RevisionRecord {
  id: string;
  proposal_id: string;
  number: number;
  spec: TaskSpec;
  digest: string;
  findings: Finding[];
  created_by: string;
  created_at: number;
  confirmed_at: number | null;
}

/** One review decision on one revision. */
export interface ReviewRecord {
  id: string;
  proposal_id: string;
  revision_id: string;
  revision_digest: string;
  reviewer_id: string;
  decision: ReviewDecision;
  comments: string;
  created_at: number;
}

interface RevisionRow extends Omit<RevisionRecord, 'spec' | 'findings'> {
  spec: string;
  findings: string;
}

function toRevision(row: RevisionRow): RevisionRecord {
  return { ...row, spec: JSON.parse(row.spec) as TaskSpec, findings: JSON.parse(row.findings) as Finding[] };
}

/** A revision as the prune loop sees it (no spec), with the facts its decision needs. */
export interface RevisionPruneRow {
  id: string;
  proposal_id: string;
  number: number;
  created_at: number;
  current: boolean;
  decided: boolean;
  ran: boolean;
}

/**
 * What listings show of a revision, read by SQLite's JSON functions: a listing of 200 proposals used
 * to parse 200 specs of up to 256 KiB in JavaScript on the event loop (ADR 0031).
 */
export interface RevisionHead {
  id: string;
  number: number;
  digest: string;
  confirmed_at: number | null;
  title: string;
  cards: number;
  runtime_kind: 'process' | 'container';
  image: string | null;
  network: 'none' | 'host' | null;
  /** The spec's `limits` ask as JSON text (small), or null; see TaskLimitsSchema. */
  limits_json: string | null;
  errors: number;
  warnings: number;
}

/** Filter for listing proposals, newest first. */
export interface ProposalListQuery {
  owner_id?: string;
  state?: ProposalState;
  before_id?: string;
  limit: number;
}

/** Statements on proposals themselves. */
function proposalStatements(db: Db) {
  return {
    get: db.prepare<[string], ProposalRecord>('SELECT * FROM proposals WHERE id = ?'),
    insert: db.prepare(
      `INSERT INTO proposals (id, owner_id, state, current_revision_id, task_id, created_at, updated_at, expires_at)
     VALUES (@id, @owner_id, @state, @current_revision_id, @task_id, @created_at, @updated_at, @expires_at)`,
    ),
    update: db.prepare(
      `UPDATE proposals SET state = @state, current_revision_id = @current_revision_id, task_id = @task_id,
       updated_at = @updated_at, expires_at = @expires_at
     WHERE id = @id AND state = @expected_state`,
    ),
    inReview: db.prepare<[string, number], ProposalRecord>(
      "SELECT * FROM proposals WHERE state = 'IN_REVIEW' AND id > ? ORDER BY id LIMIT ?",
    ),
    inReviewByTurn: db.prepare<[number, number, string, number], ProposalRecord & { turn: number }>(
      `SELECT * FROM (
         SELECT *, row_number() OVER (PARTITION BY owner_id ORDER BY id) AS turn
           FROM proposals WHERE state = 'IN_REVIEW')
        WHERE turn > ? OR (turn = ? AND id > ?)
        ORDER BY turn, id LIMIT ?`,
    ),
    openByOwner: db.prepare<[string], { n: number }>(
      "SELECT count(*) AS n FROM proposals WHERE owner_id = ? AND state IN ('DRAFT', 'IN_REVIEW', 'CHANGES_REQUESTED')",
    ),
    expired: db.prepare<[number, number], ProposalRecord>(
      'SELECT * FROM proposals WHERE expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?',
    ),
  };
}

/** Statements on revisions and on what a principal has written. */
function revisionStatements(db: Db) {
  return {
    insertRevision: db.prepare(
      `INSERT INTO revisions (id, proposal_id, number, spec, digest, findings, created_by, created_at, confirmed_at)
     VALUES (@id, @proposal_id, @number, @spec, @digest, @findings, @created_by, @created_at, NULL)`,
    ),
    confirmRevision: db.prepare(
      'UPDATE revisions SET confirmed_at = ? WHERE id = ? AND confirmed_at IS NULL',
    ),
    revision: db.prepare<[string], RevisionRow>('SELECT * FROM revisions WHERE id = ?'),
    revisionByNumber: db.prepare<[string, number], RevisionRow>(
      'SELECT * FROM revisions WHERE proposal_id = ? AND number = ?',
    ),
    revisionHead: db.prepare<[string], RevisionHead>(
      `SELECT id, number, digest, confirmed_at,
            json_extract(spec, '$.title') AS title,
            json_extract(spec, '$.cards.count') AS cards,
            json_extract(spec, '$.runtime.kind') AS runtime_kind,
            json_extract(spec, '$.runtime.image') AS image,
            json_extract(spec, '$.network') AS network,
            json_extract(spec, '$.limits') AS limits_json,
            (SELECT count(*) FROM json_each(findings) WHERE json_extract(value, '$.severity') = 'error') AS errors,
            (SELECT count(*) FROM json_each(findings) WHERE json_extract(value, '$.severity') = 'warning') AS warnings
       FROM revisions WHERE id = ?`,
    ),
    revisions: db.prepare<[string], RevisionRow>(
      'SELECT * FROM revisions WHERE proposal_id = ? ORDER BY number',
    ),
    revisionsSince: db.prepare<[string, number], { n: number }>(
      'SELECT count(*) AS n FROM revisions WHERE created_by = ? AND created_at > ?',
    ),
    usage: db.prepare<[string], { revisions: number; bytes: number }>(
      'SELECT revisions, bytes FROM principal_revision_usage WHERE principal_id = ?',
    ),
  };
}

/** Statements on reviews. */
function reviewStatements(db: Db) {
  return {
    insertReview: db.prepare(
      `INSERT INTO reviews (id, proposal_id, revision_id, revision_digest, reviewer_id, decision, comments, created_at)
     VALUES (@id, @proposal_id, @revision_id, @revision_digest, @reviewer_id, @decision, @comments, @created_at)`,
    ),
    reviews: db.prepare<[string], ReviewRecord>(
      'SELECT * FROM reviews WHERE proposal_id = ? ORDER BY created_at, id',
    ),
  };
}

/** Statements of the pruning of old revisions and abandoned proposals. */
function pruningStatements(db: Db) {
  return {
    pruneCandidates: db.prepare<
      [number, number, string, number],
      Omit<RevisionPruneRow, 'current' | 'decided' | 'ran'> & {
        current: number;
        decided: number;
        ran: number;
      }
    >(
      `SELECT r.id, r.proposal_id, r.number, r.created_at,
            r.id = p.current_revision_id AS current,
            EXISTS (SELECT 1 FROM reviews v WHERE v.revision_id = r.id) AS decided,
            EXISTS (SELECT 1 FROM tasks t WHERE t.revision_id = r.id) AS ran
       FROM revisions r JOIN proposals p ON p.id = r.proposal_id
      WHERE r.created_at < ? AND (r.created_at, r.id) > (?, ?)
      ORDER BY r.created_at, r.id LIMIT ?`,
    ),
    abandoned: db.prepare<[number, string, number], ProposalRecord>(
      `SELECT * FROM proposals p
      WHERE p.state IN ('CANCELLED', 'EXPIRED') AND p.updated_at < ? AND p.id > ?
        AND NOT EXISTS (SELECT 1 FROM reviews v WHERE v.proposal_id = p.id)
        AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.proposal_id = p.id)
      ORDER BY p.id LIMIT ?`,
    ),
    deleteRevision: db.prepare('DELETE FROM revisions WHERE id = ?'),
    deleteRevisionsOf: db.prepare('DELETE FROM revisions WHERE proposal_id = ?'),
    deleteProposal: db.prepare('DELETE FROM proposals WHERE id = ?'),
  };
}

/** Proposals, their revisions and reviews. */
export class ProposalsRepo {
  private readonly s;

  constructor(private readonly db: Db) {
    this.s = {
      ...proposalStatements(db),
      ...revisionStatements(db),
      ...reviewStatements(db),
      ...pruningStatements(db),
    };
  }

  /** The proposal with this id. */
  get(id: string): ProposalRecord | undefined {
    return this.s.get.get(id);
  }

  /** Inserts a new proposal. */
  insert(p: ProposalRecord): void {
    this.s.insert.run(p);
  }

  /**
   * Compare-and-set update: applies only if the stored state is still `expectedState`. Returns false
   * when another writer moved the proposal first; the caller re-reads and decides again.
   */
  update(p: ProposalRecord, expectedState: ProposalState): boolean {
    return this.s.update.run({ ...p, expected_state: expectedState }).changes === 1;
  }

  /** Inserts an immutable revision. */
  insertRevision(r: RevisionRecord): void {
    this.s.insertRevision.run({ ...r, spec: JSON.stringify(r.spec), findings: JSON.stringify(r.findings) });
  }

  /** Marks a revision confirmed (once). */
  confirmRevision(revisionId: string, now: number): boolean {
    return this.s.confirmRevision.run(now, revisionId).changes === 1;
  }

  /** A revision by id. */
  revision(id: string): RevisionRecord | undefined {
    const row = this.s.revision.get(id);
    return row ? toRevision(row) : undefined;
  }

  /** What listings show of a revision, without parsing its spec in JavaScript. */
  revisionHead(id: string): RevisionHead | undefined {
    return this.s.revisionHead.get(id);
  }

  /** A revision by its number within a proposal. */
  revisionByNumber(proposalId: string, number: number): RevisionRecord | undefined {
    const row = this.s.revisionByNumber.get(proposalId, number);
    return row ? toRevision(row) : undefined;
  }

  /** All revisions of a proposal, oldest first. */
  revisions(proposalId: string): RevisionRecord[] {
    return this.s.revisions.all(proposalId).map(toRevision);
  }

  /** Inserts a review. */
  insertReview(r: ReviewRecord): void {
    this.s.insertReview.run(r);
  }

  /** Reviews of a proposal, oldest first. */
  reviews(proposalId: string): ReviewRecord[] {
    return this.s.reviews.all(proposalId);
  }

  /** Proposals awaiting review, oldest first, after the cursor id. */
  inReview(afterId: string | undefined, limit: number): ProposalRecord[] {
    return this.s.inReview.all(afterId ?? '', limit);
  }

  /**
   * Proposals IN_REVIEW with owners in turn (docs/security.md "Fair share between principals"): each owner's oldest, then each owner's
   * second oldest, and so on; within a turn oldest first. `turn` is the proposal's place among its owner's
   * (1 = oldest); the page starts after (`afterTurn`, `afterId`).
   */
  inReviewByTurn(
    afterTurn: number,
    afterId: string,
    limit: number,
  ): Array<ProposalRecord & { turn: number }> {
    return this.s.inReviewByTurn.all(afterTurn, afterTurn, afterId, limit);
  }

  /** Proposals whose expiry has passed, oldest first. */
  expiredBy(now: number, limit: number): ProposalRecord[] {
    return this.s.expired.all(now, limit);
  }

  /** Proposals of `ownerId` that are not final (the open-proposals quota). */
  openCountByOwner(ownerId: string): number {
    return this.s.openByOwner.get(ownerId)?.n ?? 0;
  }

  /** Revisions `principalId` wrote after `since` (the per-hour quota). */
  revisionsWrittenSince(principalId: string, since: number): number {
    return this.s.revisionsSince.get(principalId, since)?.n ?? 0;
  }

  /** Revisions `principalId` wrote that are still stored, and their spec bytes (kept by triggers). */
  revisionUsage(principalId: string): { revisions: number; bytes: number } {
    return this.s.usage.get(principalId) ?? { revisions: 0, bytes: 0 };
  }

  /**
   * Up to `limit` revisions created before `createdBefore`, oldest first, after the cursor
   * (`created_at`, `id`): the prune loop's walk, without specs.
   */
  pruneCandidates(
    createdBefore: number,
    after: { created_at: number; id: string },
    limit: number,
  ): RevisionPruneRow[] {
    return this.s.pruneCandidates
      .all(createdBefore, after.created_at, after.id, limit)
      .map((r) => ({ ...r, current: r.current === 1, decided: r.decided === 1, ran: r.ran === 1 }));
  }

  /**
   * Up to `limit` CANCELLED or EXPIRED proposals untouched since `updatedBefore`, with no review and
   * no task, after the id cursor.
   */
  abandoned(updatedBefore: number, afterId: string, limit: number): ProposalRecord[] {
    return this.s.abandoned.all(updatedBefore, afterId, limit);
  }

  /** Deletes one revision (reviews and tasks reference the ones that must stay: those fail). */
  deleteRevision(id: string): boolean {
    return this.s.deleteRevision.run(id).changes === 1;
  }

  /** Deletes a proposal and its revisions; returns how many revisions went. */
  deleteProposal(id: string): number {
    const revisions = this.s.deleteRevisionsOf.run(id).changes;
    this.s.deleteProposal.run(id);
    return revisions;
  }

  /** Lists proposals newest first with an id cursor. */
  list(q: ProposalListQuery): ProposalRecord[] {
    return selectNewestFirst<ProposalRecord>(this.db, 'proposals', q);
  }
}
