import type { Db } from './db.js';

/** A stored output file. */
export interface OutputFile {
  path: string;
  size: number;
  sha256: string;
}

/** Task logs (chunks at byte offsets) and uploaded output files. */
export class LogsRepo {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      putChunk: db.prepare(
        'INSERT OR IGNORE INTO task_logs (execution_id, stream, offset, data) VALUES (?, ?, ?, ?)',
      ),
      chunksFrom: db.prepare<[string, string, number], { offset: number; data: Buffer }>(
        'SELECT offset, data FROM task_logs WHERE execution_id = ? AND stream = ? AND offset + length(data) > ? ORDER BY offset',
      ),
      total: db.prepare<[string, string], { total: number | null }>(
        'SELECT max(offset + length(data)) AS total FROM task_logs WHERE execution_id = ? AND stream = ?',
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
    };
  }

  /** Stores a chunk (a re-sent chunk at the same offset is ignored). */
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
    const total = this.s.total.get(executionId, stream)?.total ?? 0;
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
    return this.s.total.get(executionId, stream)?.total ?? 0;
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
