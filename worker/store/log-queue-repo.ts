import type { LocalDb } from './db.js';

/**
 * The log lane's queue (`log_queue`, migration 006): log chunks waiting, per execution, for the sender
 * to give them a seq and move them into the outbox (link/log-lane.ts). The TSDoc of each method is on
 * `LocalStore`.
 */

/** One queued chunk of a task's output, as the pump delivered it (task-io/logs.ts). */
export interface QueuedLogChunk {
  /** Position in the queue: increases with every append. */
  readonly id: number;
  readonly stream: 'stdout' | 'stderr';
  /** Byte offset of the chunk's first byte in its stream. */
  readonly offset: number;
  readonly data: string;
}

function prepareLogQueue(db: LocalDb) {
  return {
    insert: db.prepare<[string, string, number, string]>(
      'INSERT INTO log_queue (execution_id, stream, offset, data) VALUES (?, ?, ?, ?)',
    ),
    // Both use the (execution_id, id) index: one seek each, however long a flooding task's queue is.
    nextAfter: db.prepare<[string], { execution_id: string }>(
      'SELECT execution_id FROM log_queue WHERE execution_id > ? ORDER BY execution_id LIMIT 1',
    ),
    oldest: db.prepare<[string, number], QueuedLogChunk>(
      'SELECT id, stream, offset, data FROM log_queue WHERE execution_id = ? ORDER BY id LIMIT ?',
    ),
    removeThrough: db.prepare<[string, number]>('DELETE FROM log_queue WHERE execution_id = ? AND id <= ?'),
    bytesOf: db.prepare<[string], { bytes: number }>(
      'SELECT coalesce(sum(length(CAST(data AS BLOB))), 0) AS bytes FROM log_queue WHERE execution_id = ?',
    ),
  };
}

/** The log-queue methods of `LocalStore`, over `db`. */
export function logQueueRepo(db: LocalDb) {
  const stmts = prepareLogQueue(db);
  return {
    queueLogChunk: (executionId: string, stream: 'stdout' | 'stderr', offset: number, data: string): void => {
      stmts.insert.run(executionId, stream, offset, data);
    },
    nextQueuedLogExecution: (after: string): string | null =>
      stmts.nextAfter.get(after)?.execution_id ?? stmts.nextAfter.get('')?.execution_id ?? null,
    oldestQueuedLogChunks: (executionId: string, limit: number, maxBytes: number): QueuedLogChunk[] => {
      // Rows are read one at a time and the read stops past `maxBytes`: a deep queue of full chunks
      // must not be copied out of SQLite to move one of them.
      const rows: QueuedLogChunk[] = [];
      let bytes = 0;
      for (const row of stmts.oldest.iterate(executionId, limit)) {
        rows.push(row);
        bytes += Buffer.byteLength(row.data);
        if (bytes > maxBytes) break;
      }
      return rows;
    },
    removeQueuedLogChunksThrough: (executionId: string, id: number): number =>
      stmts.removeThrough.run(executionId, id).changes,
    queuedLogBytes: (executionId: string): number => stmts.bytesOf.get(executionId)?.bytes ?? 0,
  };
}
