import type { Db } from './db.js';

/**
 * Content-addressed input blobs (migration 005). The repository stores and returns bytes; it never
 * trusts them: callers recompute the sha256 of what they read (src/broker/inputs.ts), so a row changed
 * behind the master's back is refused, never served.
 */

/** A blob's metadata. */
export interface BlobMeta {
  sha256: string;
  size: number;
  created_at: number;
}

/** The blobs table and who uploaded what. */
export class BlobsRepo {
  constructor(private readonly db: Db) {}

  /** Stores `content` under `sha256` unless it is already there; true when it was new. */
  put(sha256: string, content: Buffer, now: number): boolean {
    const r = this.db
      .prepare(
        'INSERT INTO blobs (sha256, size, content, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (sha256) DO NOTHING',
      )
      .run(sha256, content.length, content, now);
    return r.changes === 1;
  }

  /** Records that `principalId` uploaded `sha256` (once per principal; the time is refreshed). */
  recordUpload(principalId: string, sha256: string, now: number): void {
    this.db
      .prepare(
        `INSERT INTO blob_uploads (principal_id, sha256, uploaded_at) VALUES (?, ?, ?)
         ON CONFLICT (principal_id, sha256) DO UPDATE SET uploaded_at = excluded.uploaded_at`,
      )
      .run(principalId, sha256, now);
  }

  /** Whether `principalId` has uploaded `sha256`. */
  uploadedBy(principalId: string, sha256: string): boolean {
    return (
      this.db
        .prepare('SELECT 1 FROM blob_uploads WHERE principal_id = ? AND sha256 = ?')
        .get(principalId, sha256) !== undefined
    );
  }

  /** Bytes the principal's uploads hold (each blob once). */
  bytesOf(principalId: string): number {
    const row = this.db
      .prepare(
        'SELECT coalesce(sum(b.size), 0) AS n FROM blob_uploads u JOIN blobs b ON b.sha256 = u.sha256 WHERE u.principal_id = ?',
      )
      .get(principalId) as { n: number };
    return row.n;
  }

  /** Sizes of those of `shas` that are stored. */
  sizes(shas: readonly string[]): Record<string, number> {
    const out: Record<string, number> = {};
    const stmt = this.db.prepare('SELECT size FROM blobs WHERE sha256 = ?');
    for (const sha of new Set(shas)) {
      const row = stmt.get(sha) as { size: number } | undefined;
      if (row) out[sha] = row.size;
    }
    return out;
  }

  /** A blob's metadata, or undefined. */
  meta(sha256: string): BlobMeta | undefined {
    return this.db.prepare('SELECT sha256, size, created_at FROM blobs WHERE sha256 = ?').get(sha256) as
      | BlobMeta
      | undefined;
  }

  /** A blob's bytes as stored (unverified), or undefined. */
  content(sha256: string): Buffer | undefined {
    const row = this.db.prepare('SELECT content FROM blobs WHERE sha256 = ?').get(sha256) as
      | { content: Buffer }
      | undefined;
    return row?.content;
  }

  /**
   * Garbage collection: deletes blobs created and last uploaded before `createdBefore` that no revision of an undecided
   * proposal (DRAFT, IN_REVIEW, CHANGES_REQUESTED), no unfinished task and no task finished after
   * `finishedAfter` names in its spec's `inputs`. Returns how many were deleted.
   */
  collectGarbage(createdBefore: number, finishedAfter: number): number {
    const r = this.db
      .prepare(
        `DELETE FROM blobs WHERE created_at < @createdBefore
           AND NOT EXISTS (SELECT 1 FROM blob_uploads u WHERE u.sha256 = blobs.sha256 AND u.uploaded_at >= @createdBefore)
           AND sha256 NOT IN (
           SELECT json_extract(i.value, '$.sha256')
             FROM revisions r JOIN proposals p ON p.id = r.proposal_id, json_each(r.spec, '$.inputs') i
            WHERE p.state IN ('DRAFT', 'IN_REVIEW', 'CHANGES_REQUESTED')
           UNION
           SELECT json_extract(i.value, '$.sha256')
             FROM tasks t, json_each(t.spec, '$.inputs') i
            WHERE t.finished_at IS NULL OR t.finished_at > @finishedAfter)`,
      )
      .run({ createdBefore, finishedAfter });
    return r.changes;
  }
}
