import type { Db } from './db.js';

/** A revision an agent reviewer could not approve: a person must decide (ADR 0027). */
export interface EscalationRecord {
  revision_id: string;
  proposal_id: string;
  reviewer_id: string;
  /** The first failing ceiling clause (src/domain/review/agent-ceiling.ts). */
  clause: string;
  reason: string;
  attempts: number;
  at: number;
}

/** Flags on revisions that need a person, one per revision (the latest refusal). */
export class EscalationsRepo {
  private readonly upsertStmt;
  private readonly getStmt;

  constructor(db: Db) {
    this.upsertStmt = db.prepare(
      `INSERT INTO review_escalations (revision_id, proposal_id, reviewer_id, clause, reason, attempts, at)
       VALUES (@revision_id, @proposal_id, @reviewer_id, @clause, @reason, 1, @at)
       ON CONFLICT (revision_id) DO UPDATE SET reviewer_id = excluded.reviewer_id, clause = excluded.clause,
         reason = excluded.reason, attempts = attempts + 1, at = excluded.at`,
    );
    this.getStmt = db.prepare<[string], EscalationRecord>(
      'SELECT * FROM review_escalations WHERE revision_id = ?',
    );
  }

  /** Records (or repeats) a refusal on a revision. */
  flag(e: Omit<EscalationRecord, 'attempts'>): void {
    this.upsertStmt.run(e);
  }

  /** The flag on a revision, if any. */
  get(revisionId: string): EscalationRecord | undefined {
    return this.getStmt.get(revisionId);
  }
}
