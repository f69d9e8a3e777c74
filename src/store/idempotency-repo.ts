import type { Db } from './db.js';

/** A stored response for one (principal, operation, key). */
export interface IdempotencyRecord {
  request_digest: string;
  response: unknown;
}

/** Idempotency keys: a replay with the same body returns the original response. */
export class IdempotencyRepo {
  private readonly getStmt;
  private readonly putStmt;
  private readonly pruneStmt;

  constructor(db: Db) {
    this.getStmt = db.prepare<[string, string, string], { request_digest: string; response: string }>(
      'SELECT request_digest, response FROM idempotency_keys WHERE principal_id = ? AND operation = ? AND key = ?',
    );
    this.pruneStmt = db.prepare('DELETE FROM idempotency_keys WHERE created_at < ?');
    this.putStmt = db.prepare(
      'INSERT INTO idempotency_keys (principal_id, operation, key, request_digest, response, created_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
  }

  /** The record for this key, if any. */
  get(principalId: string, operation: string, key: string): IdempotencyRecord | undefined {
    const row = this.getStmt.get(principalId, operation, key);
    return row
      ? { request_digest: row.request_digest, response: JSON.parse(row.response) as unknown }
      : undefined;
  }

  /** Stores the response for a key (inside the same transaction as the mutation). */
  put(
    principalId: string,
    operation: string,
    key: string,
    requestDigest: string,
    response: unknown,
    now: number,
  ): void {
    this.putStmt.run(principalId, operation, key, requestDigest, JSON.stringify(response), now);
  }

  /** Forgets keys older than `before`: a retry that late is a new request. */
  prune(before: number): number {
    return this.pruneStmt.run(before).changes;
  }
}
