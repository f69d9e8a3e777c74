import { createHash } from 'node:crypto';
import { canonicalJson } from '../contracts/canonical-json.js';
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

/** What a caller appends. */
export interface AuditInput {
  at: number;
  actor: string;
  action: string;
  subject_type: string;
  subject_id: string;
  data?: unknown;
}

/** Result of checking the chain. */
export type AuditVerification =
  | { ok: true; events: number; head: string }
  | { ok: false; events: number; first_bad_seq: number; problem: string };

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

/** hash = sha256(prev_hash ‖ canonical JSON of the event's own fields). */
export function auditHash(prevHash: string, e: Omit<AuditEvent, 'hash' | 'prev_hash'>): string {
  const body = canonicalJson({
    seq: e.seq,
    at: e.at,
    actor: e.actor,
    action: e.action,
    subject_type: e.subject_type,
    subject_id: e.subject_id,
    data: e.data,
  });
  return createHash('sha256').update(prevHash).update('\n').update(body).digest('hex');
}

/**
 * The hash-chained audit log. Appends run inside the caller's transaction, so an audit row exists
 * exactly when the state change it records was committed.
 */
export class AuditRepo {
  private readonly headStmt;
  private readonly insertStmt;
  private readonly iterStmt;
  private readonly bySubjectStmt;
  private readonly observers: Array<(e: AuditEvent) => void> = [];

  constructor(db: Db) {
    this.headStmt = db.prepare<[], { seq: number; hash: string }>(
      'SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1',
    );
    this.insertStmt = db.prepare(
      'INSERT INTO audit_events (seq, at, actor, action, subject_type, subject_id, data, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    this.iterStmt = db.prepare<[], AuditRow>('SELECT * FROM audit_events ORDER BY seq');
    this.bySubjectStmt = db.prepare<[string, string], AuditRow>(
      'SELECT * FROM audit_events WHERE subject_type = ? AND subject_id = ? ORDER BY seq',
    );
  }

  /** Appends one event to the chain. Call inside a transaction. */
  append(input: AuditInput): AuditEvent {
    const head = this.headStmt.get();
    const seq = (head?.seq ?? 0) + 1;
    const prev_hash = head?.hash ?? GENESIS_HASH;
    const data = input.data ?? {};
    const event = { seq, ...input, data };
    const hash = auditHash(prev_hash, event);
    this.insertStmt.run(
      seq,
      input.at,
      input.actor,
      input.action,
      input.subject_type,
      input.subject_id,
      canonicalJson(data),
      prev_hash,
      hash,
    );
    const appended = { ...event, prev_hash, hash };
    for (const observe of this.observers) observe(appended);
    return appended;
  }

  /**
   * Calls `fn` with every event appended from now on, inside the appending transaction (so `fn` should
   * defer anything visible with the store's afterCommit).
   */
  observe(fn: (e: AuditEvent) => void): void {
    this.observers.push(fn);
  }

  /** Events about one subject, oldest first. */
  forSubject(subjectType: string, subjectId: string): AuditEvent[] {
    return this.bySubjectStmt.all(subjectType, subjectId).map(toEvent);
  }

  /**
   * Walks the whole chain and names the first row whose hash, link or numbering is wrong.
   * Truncating the newest rows cannot be detected from inside the table; operators who need that
   * export the head hash (`audit verify --json`) elsewhere.
   */
  verify(): AuditVerification {
    let prev = GENESIS_HASH;
    let expectedSeq = 1;
    let count = 0;
    for (const row of this.iterStmt.iterate()) {
      count++;
      let event: AuditEvent;
      try {
        event = toEvent(row);
      } catch {
        return { ok: false, events: count, first_bad_seq: row.seq, problem: 'data is not valid JSON' };
      }
      if (row.seq !== expectedSeq)
        return { ok: false, events: count, first_bad_seq: row.seq, problem: `expected seq ${expectedSeq}` };
      if (row.prev_hash !== prev)
        return {
          ok: false,
          events: count,
          first_bad_seq: row.seq,
          problem: 'prev_hash does not match the row before',
        };
      if (auditHash(prev, event) !== row.hash)
        return {
          ok: false,
          events: count,
          first_bad_seq: row.seq,
          problem: 'hash does not match the row contents',
        };
      prev = row.hash;
      expectedSeq++;
    }
    return { ok: true, events: count, head: prev };
  }
}

function toEvent(row: AuditRow): AuditEvent {
  return { ...row, data: JSON.parse(row.data) as unknown };
}
