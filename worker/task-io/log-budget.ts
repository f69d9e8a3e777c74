/**
 * The per-task log cap on the worker (docs/performance.md "Noisy neighbours"): both streams of one task share `cap` bytes, the same
 * cap as the master's default (`DEFAULT_MAX_LOG_BYTES_PER_TASK`). Past it, each stream gets one marker
 * line where its output was first cut, and everything after is counted and dropped, so the worker's disk
 * and outbox hold at most the cap (plus the markers) for a task however much it writes. Pure: the pump
 * (logs.ts) asks, writes what it is told, and keeps draining the pipe.
 */

/** Which stream of the task (logs.ts's `LogStreamName`; not imported, logs.ts imports this file). */
type LogStreamName = 'stdout' | 'stderr';

/** What to do with one piece of a stream's output. */
export interface LogTake {
  /** Bytes from the start of the piece to keep (write and send); the rest is dropped. */
  readonly keep: number;
  /** True once per stream: write the marker line right after the kept bytes. */
  readonly marker: boolean;
}

/** The shared budget of one task's two streams; see the module comment. */
export class LogBudget {
  private used = 0;
  private readonly marked = new Set<LogStreamName>();
  private readonly droppedBy: Record<LogStreamName, number> = { stdout: 0, stderr: 0 };

  constructor(
    /** Bytes of output (both streams together) kept before the cut. */
    readonly cap: number,
  ) {}

  /** Accounts `n` bytes read from `stream` and says how many of them to keep. */
  take(stream: LogStreamName, n: number): LogTake {
    const keep = Math.min(n, this.cap - this.used);
    this.used += keep;
    const dropped = n - keep;
    if (dropped === 0) return { keep, marker: false };
    this.droppedBy[stream] += dropped;
    const marker = !this.marked.has(stream);
    this.marked.add(stream);
    return { keep, marker };
  }

  /** Bytes of `stream` dropped past the cap so far. */
  dropped(stream: LogStreamName): number {
    return this.droppedBy[stream];
  }
}
