import { MAX_LOG_CHUNK_BYTES } from '../contracts/worker-protocol.js';
import type { Db } from './db.js';

/**
 * The most bytes one stored chunk can hold: a `log` message's `data` is at most 2 × MAX_LOG_CHUNK_BYTES
 * UTF-16 units (the protocol's schema) and each encodes to at most 3 UTF-8 bytes; the master's cap
 * marker line is far shorter. `total` relies on it (see there).
 */
export const MAX_STORED_CHUNK_BYTES = 3 * 2 * MAX_LOG_CHUNK_BYTES;

/** A stored output file. */
export interface OutputFile {
  path: string;
  size: number;
  sha256: string;
}

/** When the retention sweep deleted a task's logs and output bytes (ms since the epoch), or null. */
export interface Pruned {
  logs_pruned_at: number | null;
  outputs_pruned_at: number | null;
}

/** Task logs (chunks at byte offsets) and uploaded output files. */
export class LogsRepo {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      putChunk: db.prepare(
        // A chunk resent at the same offset may carry more than the first one did (a restarted worker
        // reads the file again from 0 in one chunk): the longer one is kept, so nothing past the first
        // chunk's end is lost; a shorter or equal resend changes nothing.
        `INSERT INTO task_logs (execution_id, stream, offset, data) VALUES (?, ?, ?, ?)
         ON CONFLICT (execution_id, stream, offset) DO UPDATE SET data = excluded.data
         WHERE length(excluded.data) > length(task_logs.data)`,
      ),
      chunksFrom: db.prepare<[string, string, number], { offset: number; data: Buffer }>(
        'SELECT offset, data FROM task_logs WHERE execution_id = ? AND stream = ? AND offset + length(data) > ? ORDER BY offset',
      ),
      // The end of a stream is max(offset + length) over its chunks. A chunk starting more than
      // MAX_STORED_CHUNK_BYTES before the last chunk's offset ends before that offset, so only the chunks
      // in that window are read: a few index steps instead of a scan of every chunk (the scan,
      // twice per ingested chunk, was a third of the master's time under a 64 MiB log flood;
      // docs/decisions/0030-log-total-window.md).
      total: db.prepare<{ e: string; s: string; w: number }, { total: number | null }>(
        `SELECT max(offset + length(data)) AS total FROM task_logs
         WHERE execution_id = @e AND stream = @s
           AND offset >= (SELECT offset FROM task_logs WHERE execution_id = @e AND stream = @s
                          ORDER BY offset DESC LIMIT 1) - @w`,
      ),
      putOutput: db.prepare(
        'INSERT OR REPLACE INTO task_outputs (execution_id, path, size, sha256, content, created_at) VALUES (?, ?, ?, ?, ?, ?)',
      ),
      outputs: db.prepare<[string], OutputFile>(
        'SELECT path, size, sha256 FROM task_outputs WHERE execution_id = ? ORDER BY path',
      ),
      output: db.prepare<[string, string], OutputFile & { content: Buffer }>(
        'SELECT path, size, sha256, content FROM task_outputs WHERE execution_id = ? AND path = ?',
      ),
      logsDue: db.prepare<[number, number], { id: string }>(
        'SELECT id FROM tasks WHERE finished_at IS NOT NULL AND finished_at < ? AND logs_pruned_at IS NULL ORDER BY finished_at LIMIT ?',
      ),
      outputsDue: db.prepare<[number, number], { id: string }>(
        'SELECT id FROM tasks WHERE finished_at IS NOT NULL AND finished_at < ? AND outputs_pruned_at IS NULL ORDER BY finished_at LIMIT ?',
      ),
      deleteLogs: db.prepare(
        'DELETE FROM task_logs WHERE execution_id IN (SELECT id FROM executions WHERE task_id = ?)',
      ),
      // The listing (path, size, sha256) stays: it is part of the task's record; the bytes go.
      emptyOutputs: db.prepare(
        "UPDATE task_outputs SET content = x'' WHERE execution_id IN (SELECT id FROM executions WHERE task_id = ?)",
      ),
      markLogs: db.prepare('UPDATE tasks SET logs_pruned_at = ? WHERE id = ? AND logs_pruned_at IS NULL'),
      markOutputs: db.prepare(
        'UPDATE tasks SET outputs_pruned_at = ? WHERE id = ? AND outputs_pruned_at IS NULL',
      ),
      pruned: db.prepare<[string], Pruned>(
        'SELECT logs_pruned_at, outputs_pruned_at FROM tasks WHERE id = ?',
      ),
    };
  }

  /** FINAL tasks that ended before `endedBefore` whose logs (or outputs) are still kept, oldest first. */
  dueForRetention(kind: 'logs' | 'outputs', endedBefore: number, limit: number): string[] {
    const stmt = kind === 'logs' ? this.s.logsDue : this.s.outputsDue;
    return stmt.all(endedBefore, limit).map((r) => r.id);
  }

  /** Deletes a task's logs (or output bytes) and records when; returns the rows changed. */
  pruneTask(kind: 'logs' | 'outputs', taskId: string, now: number): number {
    if (kind === 'logs') {
      const n = this.s.deleteLogs.run(taskId).changes;
      this.s.markLogs.run(now, taskId);
      return n;
    }
    const n = this.s.emptyOutputs.run(taskId).changes;
    this.s.markOutputs.run(now, taskId);
    return n;
  }

  /** When retention deleted a task's logs and output bytes (null: kept). */
  prunedAt(taskId: string): Pruned {
    return this.s.pruned.get(taskId) ?? { logs_pruned_at: null, outputs_pruned_at: null };
  }

  /** Stores a chunk (a re-sent chunk at the same offset replaces it only when longer). */
  putChunk(executionId: string, stream: 'stdout' | 'stderr', offset: number, data: Buffer): void {
    this.s.putChunk.run(executionId, stream, offset, data);
  }

  /** Bytes of a stream from `from`, at most `max` bytes; `next` is the offset to continue from. */
  read(
    executionId: string,
    stream: 'stdout' | 'stderr',
    from: number,
    max: number,
  ): { data: Buffer; total: number; next: number } {
    const total = this.total(executionId, stream);
    const parts: Buffer[] = [];
    let pos = from;
    let size = 0;
    for (const c of this.s.chunksFrom.iterate(executionId, stream, from)) {
      // Chunks arrive in order over one session, so a gap is not a chunk still to come: the worker's
      // offsets count the task's raw bytes, while `data` is their UTF-8 text, which for invalid UTF-8
      // (binary output) is longer or shorter. Skip gaps and trim overlaps rather than stop reading.
      if (c.offset > pos) pos = c.offset;
      const slice = c.data.subarray(pos - c.offset);
      const take = slice.subarray(0, Math.max(0, max - size));
      parts.push(take);
      size += take.length;
      pos += take.length;
      if (size >= max) break;
    }
    return { data: Buffer.concat(parts), total, next: pos };
  }

  /** Total bytes of a stream. */
  total(executionId: string, stream: 'stdout' | 'stderr'): number {
    return this.s.total.get({ e: executionId, s: stream, w: MAX_STORED_CHUNK_BYTES })?.total ?? 0;
  }

  /** Stores an output file. */
  putOutput(executionId: string, f: OutputFile, content: Buffer, now: number): void {
    this.s.putOutput.run(executionId, f.path, f.size, f.sha256, content, now);
  }

  /** The outputs of an execution. */
  outputs(executionId: string): OutputFile[] {
    return this.s.outputs.all(executionId);
  }

  /** One output with its content. */
  output(executionId: string, path: string): (OutputFile & { content: Buffer }) | undefined {
    return this.s.output.get(executionId, path);
  }
}
