import type Database from 'better-sqlite3';
import type { Db } from './db.js';

type Statement = Database.Statement<unknown[]>;

/**
 * Content-addressed input blobs (migration 006). The repository stores and returns bytes; it never
 * trusts them: callers recompute the sha256 of what they read (src/broker/verified-blob.ts), so a row changed
 * behind the master's back is refused, never served.
 *
 * A blob belongs to those who uploaded it (docs/security.md "Code the reviewer did not read"): the bytes are stored once, but every question a
 * principal can ask — is it stored, how large is it, was it new — is answered from that principal's
 * own `blob_uploads` rows, so nothing anyone learns depends on other principals' uploads.
 */

/** A blob's metadata. */
export interface BlobMeta {
  sha256: string;
  size: number;
  created_at: number;
}

/** The blobs table and who uploaded what. */
export class BlobsRepo {
  /** Statements by SQL text, prepared on first use (preparing per call was ~⅓ of a diff's cost). */
  private readonly statements = new Map<string, Statement>();

  constructor(private readonly db: Db) {}

  private sql(text: string): Statement {
    let stmt = this.statements.get(text);
    if (stmt === undefined) {
      stmt = this.db.prepare(text);
      this.statements.set(text, stmt);
    }
    return stmt;
  }

  /**
   * Stores `content` under `sha256` unless it is already there. Callers must not tell anyone whether it
   * was (that would say whether someone else uploaded the same bytes), so nothing is returned.
   */
  put(sha256: string, content: Buffer, now: number): void {
    this.putChunks(sha256, content.length, chunksOf(content), now);
  }

  /**
   * `put` from `size` bytes handed over in pieces of any length (a temporary file read a piece at a
   * time): a blob up to BLOB_CHUNK_BYTES is stored inline, a larger one as BLOB_CHUNK_BYTES chunks
   * (migration 014-blob-chunks), so no caller needs the whole blob in memory. Throws, changing nothing once the
   * caller's transaction rolls back, when the pieces do not add up to `size`.
   */
  putChunks(
    sha256: string,
    size: number,
    pieces: Iterable<Buffer>,
    now: number,
    opts: { writeAlways?: boolean } = {},
  ): void {
    // `writeAlways` (docs/security.md "What a reviewer must read, and what the broker guarantees"): the bytes are written even when the blob is already stored
    // (someone else uploaded it), over the stored ones, which hash the same: storing them then costs
    // what storing new bytes costs, so the caller's answer time does not say whether they were there
    // (32 MiB: ~150 ms to write here against ~0.1 ms to skip).
    const again = opts.writeAlways ? 'DO UPDATE SET content = excluded.content' : 'DO NOTHING';
    if (size <= BLOB_CHUNK_BYTES) {
      const content = Buffer.concat([...pieces]);
      if (content.length !== size) throw new Error(`blob ${sha256}: ${content.length} bytes, not ${size}`);
      this.sql(
        `INSERT INTO blobs (sha256, size, content, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (sha256) ${again}`,
      ).run(sha256, size, content, now);
      return;
    }
    const fresh = this.sql(
      `INSERT INTO blobs (sha256, size, content, created_at, chunk_bytes) VALUES (?, ?, X'', ?, ?)
         ON CONFLICT (sha256) DO NOTHING`,
    ).run(sha256, size, now, BLOB_CHUNK_BYTES).changes;
    // A blob stored inline before migration 014 keeps its row: chunks beside it would never be read.
    if (fresh === 0 && (!opts.writeAlways || this.storedInline(sha256))) return;
    const insert = this.sql(
      'INSERT INTO blob_chunks (sha256, idx, bytes) VALUES (?, ?, ?) ON CONFLICT (sha256, idx) DO UPDATE SET bytes = excluded.bytes',
    );
    let idx = 0;
    let stored = 0;
    for (const chunk of rechunk(pieces, BLOB_CHUNK_BYTES)) {
      insert.run(sha256, idx++, chunk);
      stored += chunk.length;
    }
    if (stored !== size) throw new Error(`blob ${sha256}: ${stored} bytes, not ${size}`);
  }

  /** Whether `sha256` is stored as one row (no chunks). */
  private storedInline(sha256: string): boolean {
    const row = this.sql('SELECT chunk_bytes FROM blobs WHERE sha256 = ?').get(sha256) as
      | { chunk_bytes: number | null }
      | undefined;
    return row?.chunk_bytes === null;
  }

  /** Records that `principalId` uploaded `sha256` (once per principal; the time is refreshed). */
  recordUpload(principalId: string, sha256: string, now: number): void {
    this.sql(
      `INSERT INTO blob_uploads (principal_id, sha256, uploaded_at) VALUES (?, ?, ?)
         ON CONFLICT (principal_id, sha256) DO UPDATE SET uploaded_at = excluded.uploaded_at`,
    ).run(principalId, sha256, now);
  }

  /** Whether `principalId` has uploaded `sha256`. */
  uploadedBy(principalId: string, sha256: string): boolean {
    return (
      this.sql('SELECT 1 FROM blob_uploads WHERE principal_id = ? AND sha256 = ?').get(
        principalId,
        sha256,
      ) !== undefined
    );
  }

  /** Bytes the principal's uploads hold (each blob once). */
  bytesOf(principalId: string): number {
    const row = this.sql(
      'SELECT coalesce(sum(b.size), 0) AS n FROM blob_uploads u JOIN blobs b ON b.sha256 = u.sha256 WHERE u.principal_id = ?',
    ).get(principalId) as { n: number };
    return row.n;
  }

  /**
   * Sizes of those of `shas` that `principalId` uploaded (and are still stored); others' uploads never
   * count. One query for all of them (get_revision asks for ~2,000 digests per call, and one
   * statement per digest was ~17 % of the master's time under a diff flood): the digests go in as one
   * JSON array, and SQLite looks each up in the (principal_id, sha256) primary key.
   */
  sizesUploadedBy(principalId: string, shas: readonly string[]): Record<string, number> {
    // No prototype: a digest such as "constructor" is simply absent, never "owned".
    const out: Record<string, number> = Object.create(null);
    if (shas.length === 0) return out;
    const rows = this.sql(
      `SELECT u.sha256, b.size FROM blob_uploads u JOIN blobs b ON b.sha256 = u.sha256
        WHERE u.principal_id = ? AND u.sha256 IN (SELECT value FROM json_each(?))`,
    ).all(principalId, JSON.stringify([...new Set(shas)])) as Array<{ sha256: string; size: number }>;
    for (const row of rows) out[row.sha256] = row.size;
    return out;
  }

  /** A blob's metadata, or undefined. For maintenance and tests only: it ignores who uploaded it. */
  meta(sha256: string): BlobMeta | undefined {
    return this.sql('SELECT sha256, size, created_at FROM blobs WHERE sha256 = ?').get(sha256) as
      | BlobMeta
      | undefined;
  }

  /**
   * A blob's bytes as stored (unverified), only if `principalId` uploaded it; undefined otherwise, exactly
   * as for a blob that is not stored. Everything that reads content on someone's behalf (get_input, the
   * diff, a worker's fetch, policy facts about file contents) goes through this or `piecesUploadedBy`:
   * there is deliberately no way to read a blob's bytes without naming whose upload it is.
   */
  contentUploadedBy(principalId: string, sha256: string): Buffer | undefined {
    const pieces = this.piecesUploadedBy(principalId, sha256);
    return pieces === undefined ? undefined : Buffer.concat([...pieces]);
  }

  /**
   * A blob's bytes as stored (unverified) in pieces, in order: the inline content, or its chunks one at
   * a time, so reading it through holds one chunk in memory. Undefined as for contentUploadedBy.
   */
  piecesUploadedBy(principalId: string, sha256: string): Iterable<Buffer> | undefined {
    const row = this.storedRow(principalId, sha256);
    if (row === undefined) return undefined;
    if (row.chunk_bytes === null) return [row.content];
    // One chunk per statement (by primary key): no statement stays open while the caller works.
    const chunk = this.sql('SELECT bytes FROM blob_chunks WHERE sha256 = ? AND idx = ?');
    const count = Math.ceil(row.size / row.chunk_bytes);
    return (function* () {
      for (let idx = 0; idx < count; idx++) {
        const c = chunk.get(sha256, idx) as { bytes: Buffer } | undefined;
        if (c === undefined) return;
        yield c.bytes;
      }
    })();
  }

  /** The size of a blob `principalId` uploaded (without reading its bytes); undefined as for contentUploadedBy. */
  sizeUploadedBy(principalId: string, sha256: string): number | undefined {
    const row = this.sql(
      'SELECT b.size FROM blob_uploads u JOIN blobs b ON b.sha256 = u.sha256 WHERE u.principal_id = ? AND u.sha256 = ?',
    ).get(principalId, sha256) as { size: number } | undefined;
    return row?.size;
  }

  /**
   * Bytes `[start, start + length)` of a blob `principalId` uploaded, as stored (unverified). A chunked
   * blob reads only the chunks the range overlaps; an inline one is read whole by SQLite (at most
   * BLOB_CHUNK_BYTES, or a blob stored before migration 014-blob-chunks).
   */
  rangeUploadedBy(principalId: string, sha256: string, start: number, length: number): Buffer | undefined {
    const head = this.sql(
      'SELECT b.chunk_bytes FROM blob_uploads u JOIN blobs b ON b.sha256 = u.sha256 WHERE u.principal_id = ? AND u.sha256 = ?',
    ).get(principalId, sha256) as { chunk_bytes: number | null } | undefined;
    if (head === undefined) return undefined;
    if (length <= 0) return Buffer.alloc(0);
    const per = head.chunk_bytes;
    if (per === null) {
      const row = this.sql('SELECT substr(content, ?, ?) AS bytes FROM blobs WHERE sha256 = ?').get(
        start + 1,
        length,
        sha256,
      ) as { bytes: Buffer | null } | undefined;
      return row?.bytes ?? Buffer.alloc(0);
    }
    const first = Math.floor(start / per);
    const last = Math.floor((start + length - 1) / per);
    const rows = this.sql(
      'SELECT bytes FROM blob_chunks WHERE sha256 = ? AND idx BETWEEN ? AND ? ORDER BY idx',
    ).all(sha256, first, last) as Array<{ bytes: Buffer }>;
    const joined = rows.length === 1 ? rows[0]!.bytes : Buffer.concat(rows.map((r) => r.bytes));
    return joined.subarray(start - first * per, start - first * per + length);
  }

  /** The row of a blob `principalId` uploaded: inline content, or chunk_bytes for a chunked one. */
  private storedRow(
    principalId: string,
    sha256: string,
  ): { content: Buffer; size: number; chunk_bytes: number | null } | undefined {
    return this.sql(
      'SELECT b.content, b.size, b.chunk_bytes FROM blob_uploads u JOIN blobs b ON b.sha256 = u.sha256 WHERE u.principal_id = ? AND u.sha256 = ?',
    ).get(principalId, sha256) as { content: Buffer; size: number; chunk_bytes: number | null } | undefined;
  }

  /**
   * Garbage collection, per uploader so that no one's blob outlives its own reasons: first each upload
   * row last refreshed before `createdBefore` is dropped unless an undecided proposal (DRAFT, IN_REVIEW,
   * CHANGES_REQUESTED) of that principal, or a task of theirs that is unfinished or finished after
   * `finishedAfter`, names the digest in its spec's `inputs`; then every blob nobody's upload row holds
   * is deleted. (Keeping a blob alive because another principal names it would let that other
   * principal's proposals decide whether this one's upload still counts, which tells them it exists.)
   * Returns how many blobs were deleted. All at once: the master's sweep goes batch by batch instead
   * (expireUploads, deleteUnheld; src/broker/loops/blob-gc.ts).
   */
  collectGarbage(createdBefore: number, finishedAfter: number): number {
    while (this.expireUploads(createdBefore, finishedAfter, GC_BATCH_ROWS) === GC_BATCH_ROWS);
    let deleted = 0;
    for (;;) {
      const batch = this.deleteUnheld(createdBefore, GC_BATCH_ROWS, GC_BATCH_BYTES);
      deleted += batch.blobs;
      if (!batch.more || batch.blobs === 0) return deleted;
    }
  }

  /** Step 1 of collectGarbage for at most `limit` upload rows; returns how many were dropped. */
  expireUploads(createdBefore: number, finishedAfter: number, limit: number): number {
    return this.sql(EXPIRE_UPLOADS_SQL).run({ createdBefore, finishedAfter, limit }).changes;
  }

  /**
   * Step 2 of collectGarbage: deletes blobs older than `createdBefore` that no upload row holds, at most
   * `limit` of them and about `maxBytes` of content (at least one); `more` when some may be left.
   */
  deleteUnheld(createdBefore: number, limit: number, maxBytes: number): { blobs: number; more: boolean } {
    const candidates = this.sql(
      `SELECT sha256, size FROM blobs WHERE created_at < ?
            AND NOT EXISTS (SELECT 1 FROM blob_uploads u WHERE u.sha256 = blobs.sha256) LIMIT ?`,
    ).all(createdBefore, limit) as Array<{ sha256: string; size: number }>;
    const chosen: string[] = [];
    let bytes = 0;
    for (const c of candidates) {
      if (chosen.length > 0 && bytes + c.size > maxBytes) break;
      chosen.push(c.sha256);
      bytes += c.size;
    }
    const del = this.sql(
      'DELETE FROM blobs WHERE sha256 = ? AND NOT EXISTS (SELECT 1 FROM blob_uploads u WHERE u.sha256 = blobs.sha256)',
    );
    let deleted = 0;
    for (const sha256 of chosen) deleted += del.run(sha256).changes;
    return { blobs: deleted, more: candidates.length === limit || chosen.length < candidates.length };
  }
}

/**
 * Step 1 of a collection (BlobsRepo.expireUploads). The (owner, digest) pairs still in use are computed
 * once per batch; SQLite answers the row-value NOT IN from an index it builds on them, so a batch is one
 * pass over expired rows. Which tasks count is read through two partial indexes, tasks_unfinished
 * (migration 014-blob-chunks) and tasks_finished_at, never by scanning the task history (96 ms per batch
 * with 50,000 finished tasks, 17 ms with the index; test/unit/store/blob-gc.test.ts checks the plan).
 */
export const EXPIRE_UPLOADS_SQL = `WITH in_use (principal_id, sha256) AS (
     SELECT p.owner_id, json_extract(i.value, '$.sha256')
       FROM proposals p JOIN revisions r ON r.proposal_id = p.id, json_each(r.spec, '$.inputs') i
      WHERE p.state IN ('DRAFT', 'IN_REVIEW', 'CHANGES_REQUESTED')
     UNION
     SELECT t.owner_id, json_extract(i.value, '$.sha256')
       FROM tasks t, json_each(t.spec, '$.inputs') i
      WHERE t.finished_at IS NULL OR t.finished_at > @finishedAfter)
   DELETE FROM blob_uploads WHERE rowid IN (
     SELECT rowid FROM blob_uploads WHERE uploaded_at < @createdBefore
        AND (principal_id, sha256) NOT IN (SELECT principal_id, sha256 FROM in_use)
      LIMIT @limit)`;

/**
 * Blobs larger than this are stored as chunks of this size (migration 014-blob-chunks): a get_input page of
 * 256 KiB then reads at most two chunks, and a blob of any allowed size fits (one SQLite value is at
 * most 1,000,000,000 bytes).
 */
export const BLOB_CHUNK_BYTES = 1024 * 1024;

/** `content` as pieces of at most BLOB_CHUNK_BYTES (views, no copies). */
function chunksOf(content: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < content.length; at += BLOB_CHUNK_BYTES)
    out.push(content.subarray(at, at + BLOB_CHUNK_BYTES));
  return out.length === 0 ? [content] : out;
}

/** Re-cuts pieces of any length into chunks of exactly `size` bytes (the last one shorter). */
function* rechunk(pieces: Iterable<Buffer>, size: number): Generator<Buffer> {
  let pending: Buffer[] = [];
  let held = 0;
  for (const piece of pieces) {
    let at = 0;
    while (at < piece.length) {
      const take = Math.min(size - held, piece.length - at);
      pending.push(piece.subarray(at, at + take));
      held += take;
      at += take;
      if (held === size) {
        yield pending.length === 1 ? pending[0]! : Buffer.concat(pending);
        pending = [];
        held = 0;
      }
    }
  }
  if (held > 0) yield Buffer.concat(pending);
}

/** Rows per garbage-collection batch (one transaction each in the sweep). */
export const GC_BATCH_ROWS = 500;
/** Content bytes per batch of deleted blobs: freeing a blob walks its pages. */
export const GC_BATCH_BYTES = 64 * 1024 * 1024;
