import type { MasterMessage } from '../contracts/worker-protocol.js';
import type { Db } from './db.js';

/** An unacknowledged message to a worker. */
export interface OutboxEntry {
  id: number;
  worker_id: string;
  boot_id: string;
  seq: number;
  body: MasterMessage;
}

/**
 * The master's outbox: messages to workers, written in the same transaction as the decision that caused
 * them, kept until the worker acknowledges them, and resent in order after a reconnect.
 */
export class OutboxRepo {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      maxSeq: db.prepare<[string], { seq: number | null }>(
        'SELECT max(seq) AS seq FROM master_outbox WHERE boot_id = ?',
      ),
      insert: db.prepare(
        'INSERT INTO master_outbox (worker_id, boot_id, seq, body, created_at) VALUES (?, ?, ?, ?, ?)',
      ),
      unacked: db.prepare<
        [string],
        { id: number; worker_id: string; boot_id: string; seq: number; body: string }
      >(
        'SELECT id, worker_id, boot_id, seq, body FROM master_outbox WHERE worker_id = ? AND acked_at IS NULL ORDER BY id',
      ),
      ack: db.prepare(
        'UPDATE master_outbox SET acked_at = ? WHERE worker_id = ? AND boot_id = ? AND seq = ? AND acked_at IS NULL',
      ),
      ackThrough: db.prepare(
        'UPDATE master_outbox SET acked_at = ? WHERE worker_id = ? AND boot_id = ? AND seq <= ? AND acked_at IS NULL',
      ),
      bySeq: db.prepare<[string, string, number], { body: string }>(
        'SELECT body FROM master_outbox WHERE worker_id = ? AND boot_id = ? AND seq = ?',
      ),
      pendingAssign: db.prepare<[string, string], { boot_id: string; seq: number }>(
        `SELECT boot_id, seq FROM master_outbox WHERE worker_id = ? AND acked_at IS NULL
           AND json_extract(body, '$.type') = 'assign' AND json_extract(body, '$.plan.execution_id') = ? LIMIT 1`,
      ),
      withdrawAssign: db.prepare(
        `UPDATE master_outbox SET acked_at = ? WHERE worker_id = ? AND acked_at IS NULL
           AND json_extract(body, '$.type') = 'assign' AND json_extract(body, '$.plan.execution_id') = ?`,
      ),
      // The newest row of each boot stays: `append` numbers from it, and a seq handed out twice would be
      // dropped by a worker as a duplicate (and acknowledged), so the message would never run.
      prune: db.prepare(
        `DELETE FROM master_outbox WHERE acked_at IS NOT NULL AND acked_at < ?
           AND id NOT IN (SELECT max(id) FROM master_outbox GROUP BY boot_id)`,
      ),
    };
  }

  /** Appends a message for a worker, numbering it in this master boot's sequence. */
  append(workerId: string, bootId: string, build: (seq: number) => MasterMessage, now: number): OutboxEntry {
    const seq = (this.s.maxSeq.get(bootId)?.seq ?? 0) + 1;
    const body = build(seq);
    const info = this.s.insert.run(workerId, bootId, seq, JSON.stringify(body), now);
    return { id: Number(info.lastInsertRowid), worker_id: workerId, boot_id: bootId, seq, body };
  }

  /** Unacknowledged messages for a worker, oldest first. */
  unacked(workerId: string): OutboxEntry[] {
    return this.s.unacked.all(workerId).map((r) => ({ ...r, body: JSON.parse(r.body) as MasterMessage }));
  }

  /** Marks one message acknowledged. */
  ack(workerId: string, bootId: string, seq: number, now: number): boolean {
    return this.s.ack.run(now, workerId, bootId, seq).changes === 1;
  }

  /** Marks every message up to `seq` of a boot acknowledged (the worker's `master_marks`). */
  ackThrough(workerId: string, bootId: string, seq: number, now: number): number {
    return this.s.ackThrough.run(now, workerId, bootId, seq).changes;
  }

  /** The message of a worker's sequence under this master boot at `seq`, if it is still kept. */
  message(workerId: string, bootId: string, seq: number): MasterMessage | undefined {
    const row = this.s.bySeq.get(workerId, bootId, seq);
    return row === undefined ? undefined : (JSON.parse(row.body) as MasterMessage);
  }

  /** Where an execution's unacknowledged `assign` sits in the master's sequence, if one is unacknowledged. */
  pendingAssign(workerId: string, executionId: string): { boot_id: string; seq: number } | undefined {
    return this.s.pendingAssign.get(workerId, executionId);
  }

  /**
   * Withdraws an unacknowledged `assign` of an execution that was decided without its worker (operator
   * reconcile): it is never sent again. The row is kept and counts as acknowledged, so its seq is never
   * handed out again (a worker that did process it would drop a reused seq as a duplicate).
   */
  withdrawAssign(workerId: string, executionId: string, now: number): number {
    return this.s.withdrawAssign.run(now, workerId, executionId).changes;
  }

  /** Deletes messages acknowledged before `before`, except the newest of each boot (it holds the seq). */
  prune(before: number): number {
    return this.s.prune.run(before).changes;
  }
}
