import type { LocalDb } from './db.js';

/**
 * The durable outbox: outgoing sequenced messages (`outbox`) kept until the master acknowledges them,
 * and the last seq handed out per worker boot (`outbox_seqs`). The TSDoc of each method is on `LocalStore`.
 */

/** One outgoing message waiting for (or holding) its acknowledgement. */
export interface OutboxEntry {
  readonly boot_id: string;
  readonly seq: number;
  /** The message as built by the caller, with its `boot_id` and `seq`. */
  readonly message: unknown;
  readonly created_at: number;
}

/**
 * An unacknowledged message as the pump sends it: the stored JSON text itself (sent as is, never parsed
 * and serialised again) with its position in the outbox.
 */
export interface OutboxPageEntry {
  /** Position in the outbox: increases with every append, across boots. */
  readonly id: number;
  readonly boot_id: string;
  readonly seq: number;
  /** The message's `type` (`log`, `execution`, …), null when it had none. */
  readonly kind: string | null;
  /** The message as stored: the exact text to send. */
  readonly text: string;
}

/** One acknowledgement from the master: the message `(boot_id, seq)` was processed. */
export interface OutboxAck {
  readonly boot_id: string;
  readonly seq: number;
}

interface OutboxRow {
  boot_id: string;
  seq: number;
  message_json: string;
  created_at: number;
}

function prepareOutbox(db: LocalDb) {
  return {
    nextSeq: db.prepare<[string], { last_seq: number }>(
      `INSERT INTO outbox_seqs (boot_id, last_seq) VALUES (?, 1)
       ON CONFLICT (boot_id) DO UPDATE SET last_seq = last_seq + 1
       RETURNING last_seq`,
    ),
    insertOutbox: db.prepare<[string, number, string, string | null, number]>(
      'INSERT INTO outbox (boot_id, seq, message_json, kind, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    ack: db.prepare<[number, string, number]>(
      'UPDATE outbox SET acked_at = ? WHERE boot_id = ? AND seq = ? AND acked_at IS NULL',
    ),
    ackThrough: db.prepare<[number, string, number]>(
      'UPDATE outbox SET acked_at = ? WHERE boot_id = ? AND seq <= ? AND acked_at IS NULL',
    ),
    unacked: db.prepare<[number], OutboxRow>(
      'SELECT boot_id, seq, message_json, created_at FROM outbox WHERE acked_at IS NULL ORDER BY id LIMIT ?',
    ),
    unackedAfter: db.prepare<[number, number], OutboxPageEntry>(
      `SELECT id, boot_id, seq, kind, message_json AS text FROM outbox
       WHERE acked_at IS NULL AND id > ? ORDER BY id LIMIT ?`,
    ),
    anyUnacked: db.prepare<[], { one: number }>('SELECT 1 AS one FROM outbox WHERE acked_at IS NULL LIMIT 1'),
    supersede: db.prepare<[number, string]>(
      'UPDATE outbox SET acked_at = ? WHERE acked_at IS NULL AND kind = ?',
    ),
    // Log chunks are forgotten as soon as the master has them: a flooding task's acknowledged chunks
    // must not pile up on disk for KEEP_ACKED_MS (the outbox stays at about the in-flight window).
    dropAckedLogs: db.prepare<[string, number]>(
      "DELETE FROM outbox WHERE boot_id = ? AND seq <= ? AND kind = 'log' AND acked_at IS NOT NULL",
    ),
    dropAckedLog: db.prepare<[string, number]>(
      "DELETE FROM outbox WHERE boot_id = ? AND seq = ? AND kind = 'log' AND acked_at IS NOT NULL",
    ),
    prune: db.prepare<[number]>('DELETE FROM outbox WHERE acked_at IS NOT NULL AND acked_at < ?'),
  };
}

/** The outbox methods of `LocalStore`, over `db`. */
export function outboxRepo(db: LocalDb, now: () => number) {
  const stmts = prepareOutbox(db);

  const appendOutbox = db.transaction((bootId: string, build: (seq: number) => unknown): OutboxEntry => {
    const seq = stmts.nextSeq.get(bootId)!.last_seq;
    const message = build(seq);
    const created = now();
    const kind = (message as { type?: unknown } | null)?.type;
    stmts.insertOutbox.run(
      bootId,
      seq,
      JSON.stringify(message),
      typeof kind === 'string' ? kind : null,
      created,
    );
    return { boot_id: bootId, seq, message, created_at: created };
  });

  const ackOne = (at: number, bootId: string, seq: number): boolean => {
    const waiting = stmts.ack.run(at, bootId, seq).changes > 0;
    if (waiting) stmts.dropAckedLog.run(bootId, seq);
    return waiting;
  };

  // One commit for every acknowledgement of a batch (the master acknowledges each message on its own).
  const ackMany = db.transaction((acks: readonly OutboxAck[]): number => {
    const at = now();
    let n = 0;
    for (const a of acks) if (ackOne(at, a.boot_id, a.seq)) n++;
    return n;
  });

  return {
    appendOutbox: (bootId: string, build: (seq: number) => unknown): OutboxEntry =>
      appendOutbox.immediate(bootId, build),
    ackOutbox: (bootId: string, seq: number): boolean => ackOne(now(), bootId, seq),
    ackOutboxMany: (acks: readonly OutboxAck[]): number => (acks.length === 0 ? 0 : ackMany.immediate(acks)),
    hasUnackedOutbox: (): boolean => stmts.anyUnacked.get() !== undefined,
    ackOutboxThrough: (bootId: string, seq: number): number => {
      const n = stmts.ackThrough.run(now(), bootId, seq).changes;
      if (n > 0) stmts.dropAckedLogs.run(bootId, seq);
      return n;
    },
    listUnackedOutbox: (limit = 10_000): OutboxEntry[] =>
      stmts.unacked.all(limit).map((r) => ({
        boot_id: r.boot_id,
        seq: r.seq,
        message: JSON.parse(r.message_json) as unknown,
        created_at: r.created_at,
      })),
    listUnackedOutboxAfter: (afterId: number, limit: number): OutboxPageEntry[] =>
      stmts.unackedAfter.all(afterId, limit),
    supersedeUnacked: (type: string): number => stmts.supersede.run(now(), type).changes,
    pruneOutbox: (before: number): number => stmts.prune.run(before).changes,
  };
}
