import { createHash } from 'node:crypto';
import { canonicalJson, canonicalJsonWith } from '../contracts/canonical-json.js';
import type { AuditAction } from '../domain/retention/audit-action.js';
import type { Db } from './db.js';

/** The hash before the first audit event. */
export const GENESIS_HASH = '0'.repeat(64);

/** One audit event as stored. */
export interface AuditEvent {
  seq: number;
  at: number;
  actor: string;
  action: string;
  subject_type: string;
  subject_id: string;
  data: unknown;
  prev_hash: string;
  hash: string;
}

/** What a caller appends: the action is one of the audit vocabulary's (src/domain/retention/audit-action.ts). */
export interface AuditInput {
  at: number;
  actor: string;
  action: AuditAction;
  subject_type: string;
  subject_id: string;
  data?: unknown;
}

/** Result of checking the chain. */
export type AuditVerification =
  | { ok: true; events: number; head: string }
  | { ok: false; events: number; first_bad_seq: number; problem: string };

/** A verified position in the chain: a row's seq and hash (seq 0 and the genesis hash before the first). */
export interface ChainPoint {
  seq: number;
  hash: string;
}

/** Result of checking one batch of rows after a known-good point. */
export type BatchVerification =
  | { ok: true; through: ChainPoint; checked: number; done: boolean }
  | { ok: false; checked: number; first_bad_seq: number; problem: string };

/** A segment of the chain moved to an archive file (migration 006). */
export interface ArchiveSegment {
  first_seq: number;
  last_seq: number;
  first_prev_hash: string;
  last_hash: string;
  file: string;
  archived_at: number;
}

/** The master's remembered verification progress (migration 006). */
export interface AuditCheckpoint {
  verified_seq: number;
  verified_hash: string;
  verified_at: number;
  full_at: number | null;
}

/** Rows a full or incremental pass reads per batch when the caller does not say. */
export const DEFAULT_AUDIT_BATCH = 200;

interface AuditRow {
  seq: number;
  at: number;
  actor: string;
  action: string;
  subject_type: string;
  subject_id: string;
  data: string;
  prev_hash: string;
  hash: string;
}

/**
 * hash = sha256(prev_hash ‖ canonical JSON of the event's own fields). `dataJson`, when given, is
 * canonicalJson(e.data) already made (the appender stores that text too): the same hash, one
 * serialisation of the data fewer.
 */
export function auditHash(
  prevHash: string,
  e: Omit<AuditEvent, 'hash' | 'prev_hash'>,
  dataJson?: string,
): string {
  const fields = {
    seq: e.seq,
    at: e.at,
    actor: e.actor,
    action: e.action,
    subject_type: e.subject_type,
    subject_id: e.subject_id,
    data: e.data,
  };
  const body = dataJson === undefined ? canonicalJson(fields) : canonicalJsonWith(fields, { data: dataJson });
  return createHash('sha256').update(prevHash).update('\n').update(body).digest('hex');
}

/**
 * Checks one stored row against the verified point before it: numbering, link and hash. Returns the
 * problem, or null when the row is good. Shared by the live table and archive files.
 */
export function checkAuditRow(prev: ChainPoint, row: AuditEvent): string | null {
  if (row.seq !== prev.seq + 1) return `expected seq ${prev.seq + 1}`;
  if (row.prev_hash !== prev.hash) return 'prev_hash does not match the row before';
  if (auditHash(prev.hash, row) !== row.hash) return 'hash does not match the row contents';
  return null;
}

/**
 * The hash-chained audit log. Appends run inside the caller's transaction, so an audit row exists
 * exactly when the state change it records was committed. Old rows may leave the table only into an
 * archive segment (`audit_archive`), so the chain stays verifiable from genesis through the files.
 */
export class AuditRepo {
  private readonly headStmt;
  private readonly insertStmt;
  private readonly insertOnHeldStmt;
  private readonly afterStmt;
  private readonly rowStmt;
  private readonly bySubjectStmt;
  private readonly segmentsStmt;
  private readonly lastSegmentStmt;
  private readonly firstLiveStmt;
  private readonly insertSegmentStmt;
  private readonly deleteArchivedStmt;
  private readonly countStmt;
  private readonly checkpointStmt;
  private readonly saveCheckpointStmt;
  private readonly observers: Array<(e: AuditEvent) => void> = [];
  /**
   * The chain's head as this connection's open transaction left it, so that a transaction appending
   * several rows reads the head once (a report's moves append two to four). Only kept while the store
   * says a transaction is open (`holdHead`); forgotten when it ends, when any part of it rolls back, and
   * by every other write to the table here. Inside one transaction another connection cannot move it:
   * SQLite's snapshot is fixed, and a write lock taken on a stale snapshot fails (SQLITE_BUSY_SNAPSHOT).
   * This connection can drop it where the store does not see: a raw `db.transaction` savepoint that
   * rolls back inside the store's transaction, or SQLite rolling the whole transaction back itself
   * (SQLITE_FULL, IOERR) while a caller that caught the error goes on. So an append on a held head is
   * made only if that head is still the newest row (`insertOnHeldStmt`), and reads the head otherwise.
   */
  private heldHead: ChainPoint | null = null;
  private holding = false;

  constructor(private readonly db: Db) {
    this.headStmt = db.prepare<[], { seq: number; hash: string }>(
      'SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1',
    );
    this.insertStmt = db.prepare(
      'INSERT INTO audit_events (seq, at, actor, action, subject_type, subject_id, data, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    // The same insert, made only if the row `held` names is still the newest one (an index seek inside
    // the one statement): a held head the store could not see go (see `heldHead`) inserts nothing.
    this.insertOnHeldStmt = db.prepare(
      `INSERT INTO audit_events (seq, at, actor, action, subject_type, subject_id, data, prev_hash, hash)
       SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?
       WHERE (SELECT seq = ? AND hash = ? FROM audit_events ORDER BY seq DESC LIMIT 1)`,
    );
    this.afterStmt = db.prepare<[number, number], AuditRow>(
      'SELECT * FROM audit_events WHERE seq > ? ORDER BY seq LIMIT ?',
    );
    this.rowStmt = db.prepare<[number], AuditRow>('SELECT * FROM audit_events WHERE seq = ?');
    this.bySubjectStmt = db.prepare<[string, string], AuditRow>(
      'SELECT * FROM audit_events WHERE subject_type = ? AND subject_id = ? ORDER BY seq',
    );
    this.segmentsStmt = db.prepare<[], ArchiveSegment>('SELECT * FROM audit_archive ORDER BY first_seq');
    this.lastSegmentStmt = db.prepare<[], ArchiveSegment>(
      'SELECT * FROM audit_archive ORDER BY first_seq DESC LIMIT 1',
    );
    this.firstLiveStmt = db.prepare<[], { seq: number | null }>('SELECT min(seq) AS seq FROM audit_events');
    this.insertSegmentStmt = db.prepare(
      'INSERT INTO audit_archive (first_seq, last_seq, first_prev_hash, last_hash, file, archived_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.deleteArchivedStmt = db.prepare(
      'DELETE FROM audit_events WHERE seq IN (SELECT seq FROM audit_events WHERE seq <= ? ORDER BY seq LIMIT ?)',
    );
    this.countStmt = db.prepare<[], { n: number }>('SELECT count(*) AS n FROM audit_events');
    this.checkpointStmt = db.prepare<[], AuditCheckpoint>(
      'SELECT verified_seq, verified_hash, verified_at, full_at FROM audit_checkpoint WHERE id = 1',
    );
    this.saveCheckpointStmt = db.prepare(
      `INSERT INTO audit_checkpoint (id, verified_seq, verified_hash, verified_at, full_at) VALUES (1, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET verified_seq = excluded.verified_seq, verified_hash = excluded.verified_hash,
         verified_at = excluded.verified_at, full_at = coalesce(excluded.full_at, full_at)`,
    );
  }

  /** Appends one event to the chain. Call inside a transaction. */
  append(input: AuditInput): AuditEvent {
    const held = this.holding ? this.heldHead : null;
    if (held !== null) {
      const appended = this.insertAfter(held, input, true);
      if (appended !== null) return this.observed(appended);
      // The held head is gone or no longer the newest row: rolled back where the store could not see
      // it (a raw savepoint, a transaction SQLite itself rolled back on SQLITE_FULL / IOERR while the
      // caller went on), or another repo on this connection appended. Read the head again.
      this.heldHead = null;
    }
    return this.observed(this.insertAfter(this.headStmt.get() ?? null, input, false)!);
  }

  /** Inserts `input` after `head`; when `checked`, only if `head` is still the newest row (else null). */
  private insertAfter(head: ChainPoint | null, input: AuditInput, checked: boolean): AuditEvent | null {
    const seq = (head?.seq ?? 0) + 1;
    const prev_hash = head?.hash ?? GENESIS_HASH;
    const data = input.data ?? {};
    const event = { seq, ...input, data };
    const dataJson = canonicalJson(data);
    const hash = auditHash(prev_hash, event, dataJson);
    const values = [
      seq,
      input.at,
      input.actor,
      input.action,
      input.subject_type,
      input.subject_id,
      dataJson,
      prev_hash,
      hash,
    ] as const;
    if (checked) {
      if (this.insertOnHeldStmt.run(...values, head?.seq ?? 0, prev_hash).changes !== 1) return null;
    } else this.insertStmt.run(...values);
    if (this.holding) this.heldHead = { seq, hash };
    return { ...event, prev_hash, hash };
  }

  /** Hands an appended event to the observers; returns it. */
  private observed(appended: AuditEvent): AuditEvent {
    for (const observe of this.observers) observe(appended);
    return appended;
  }

  /**
   * The store's transaction bookkeeping (src/store/store.ts): `true` when its outermost transaction
   * begins, `false` when it ends; `forgetHead` when any part of one rolls back. See `heldHead`.
   */
  holdHead(open: boolean): void {
    this.holding = open;
    this.heldHead = null;
  }

  /** Drops the held head (a rollback, or a write to the table other than `append`). */
  forgetHead(): void {
    this.heldHead = null;
  }

  /**
   * Calls `fn` with every event appended from now on, inside the appending transaction (so `fn` should
   * defer anything visible with the store's afterCommit). Returns the call that stops it.
   */
  observe(fn: (e: AuditEvent) => void): () => void {
    this.observers.push(fn);
    return () => {
      const i = this.observers.indexOf(fn);
      if (i >= 0) this.observers.splice(i, 1);
    };
  }

  /** Events about one subject still in the live table, oldest first. */
  forSubject(subjectType: string, subjectId: string): AuditEvent[] {
    return this.bySubjectStmt.all(subjectType, subjectId).map(toEvent);
  }

  /** The newest row, or null on an empty table. */
  head(): ChainPoint | null {
    return this.headStmt.get() ?? null;
  }

  /** Rows in the live table. */
  count(): number {
    return this.countStmt.get()?.n ?? 0;
  }

  /** Where the live table's chain starts: the end of the newest archive segment, or genesis. */
  liveStart(): ChainPoint {
    // The newest segment alone (an index seek): archives keep up by writing many segments (docs/performance.md "Noisy neighbours").
    const last = this.lastSegmentStmt.get();
    return last ? { seq: last.last_seq, hash: last.last_hash } : { seq: 0, hash: GENESIS_HASH };
  }

  /** Up to `limit` rows after `seq`, oldest first (a row whose data is not JSON is thrown on). */
  rowsAfter(seq: number, limit: number): AuditEvent[] {
    return this.afterStmt.all(seq, limit).map(toEvent);
  }

  /**
   * Checks up to `limit` rows after the verified point `from`. One call is one short synchronous read;
   * callers that walk a long chain yield to the event loop between calls.
   */
  verifyBatch(from: ChainPoint, limit = DEFAULT_AUDIT_BATCH): BatchVerification {
    const rows = this.afterStmt.all(from.seq, limit);
    let prev = from;
    let checked = 0;
    for (const row of rows) {
      checked++;
      let event: AuditEvent;
      try {
        event = toEvent(row);
      } catch {
        return { ok: false, checked, first_bad_seq: row.seq, problem: 'data is not valid JSON' };
      }
      const problem = checkAuditRow(prev, event);
      if (problem) return { ok: false, checked, first_bad_seq: row.seq, problem };
      prev = { seq: row.seq, hash: row.hash };
    }
    return { ok: true, through: prev, checked, done: rows.length < limit };
  }

  /**
   * Re-checks the row an incremental pass continues from: it must still exist, still carry the hash
   * that was verified, and still hash to it from its own contents and link. Returns the problem or null.
   */
  checkAnchor(anchor: ChainPoint): string | null {
    if (anchor.seq === 0) return null;
    const row = this.rowStmt.get(anchor.seq);
    if (!row) {
      const start = this.liveStart();
      if (start.seq === anchor.seq && start.hash === anchor.hash) return null;
      return `verified row ${anchor.seq} is missing`;
    }
    if (row.hash !== anchor.hash) return 'hash differs from the one verified earlier';
    let event: AuditEvent;
    try {
      event = toEvent(row);
    } catch {
      return 'data is not valid JSON';
    }
    if (auditHash(row.prev_hash, event) !== row.hash) return 'hash does not match the row contents';
    return null;
  }

  /**
   * Walks the whole live chain from its start (genesis, or the newest archive segment's end) and names
   * the first row whose hash, link or numbering is wrong. Synchronous: for the CLI and tests; the master
   * walks in batches (src/broker/loops/audit-monitor.ts). Truncating the newest rows cannot be detected from
   * inside the table; operators who need that export the head hash (`audit verify --json`) elsewhere.
   */
  verify(): AuditVerification {
    let point = this.liveStart();
    let events = 0;
    for (;;) {
      const b = this.verifyBatch(point);
      events += b.checked;
      if (!b.ok) return { ok: false, events, first_bad_seq: b.first_bad_seq, problem: b.problem };
      point = b.through;
      if (b.done) return { ok: true, events, head: point.hash };
    }
  }

  /** Archive segments, oldest first. */
  segments(): ArchiveSegment[] {
    return this.segmentsStmt.all();
  }

  /**
   * The newest row older than `at`, or null. A binary search over seq (rows are appended in time
   * order), so it costs O(log n) point reads where a scan of `at` cost the whole live table; a clock
   * stepped back can only move the answer by the rows written during the step.
   */
  lastSeqBefore(at: number): number | null {
    const first = this.firstLiveStmt.get()?.seq ?? null;
    const last = this.headStmt.get()?.seq ?? null;
    if (first === null || last === null) return null;
    const atOf = (seq: number) => this.rowStmt.get(seq)?.at ?? Number.POSITIVE_INFINITY;
    if (atOf(first) >= at) return null;
    let lo = first; // at(lo) < at
    let hi = last + 1; // at(hi) >= at, or past the end
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (atOf(mid) < at) lo = mid;
      else hi = mid;
    }
    return lo;
  }

  /**
   * Records a segment already written to its file. Its rows are then deleted in batches
   * (`deleteArchived`): one delete of 10,000 rows held the event loop 0.2–0.7 s here (docs/performance.md "Noisy neighbours"). Rows a
   * recorded segment covers are outside the live chain (it starts after the newest segment), so rows
   * left by a crash between batches change nothing and the next run deletes them.
   */
  recordArchive(segment: ArchiveSegment): void {
    this.insertSegmentStmt.run(
      segment.first_seq,
      segment.last_seq,
      segment.first_prev_hash,
      segment.last_hash,
      segment.file,
      segment.archived_at,
    );
  }

  /**
   * Deletes up to `limit` of the oldest rows that recorded segments cover; returns how many (fewer than
   * `limit`: none are left). The delete trigger refuses any row no recorded segment covers.
   */
  deleteArchived(limit: number): number {
    this.forgetHead();
    return this.db.transaction(() => this.deleteArchivedStmt.run(this.liveStart().seq, limit).changes)();
  }

  /** The remembered verification progress, or null before the first. */
  checkpoint(): AuditCheckpoint | null {
    return this.checkpointStmt.get() ?? null;
  }

  /** Remembers verification progress; `full_at` null keeps the previous full-pass time. */
  saveCheckpoint(c: AuditCheckpoint): void {
    this.saveCheckpointStmt.run(c.verified_seq, c.verified_hash, c.verified_at, c.full_at);
  }
}

function toEvent(row: AuditRow): AuditEvent {
  return { ...row, data: JSON.parse(row.data) as unknown };
}
