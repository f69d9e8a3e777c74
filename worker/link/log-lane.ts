import { MAX_LOG_CHUNK_BYTES, type WorkerSequencedBody } from '../../src/contracts/worker-protocol.js';
import type { LocalStore, QueuedLogChunk } from '../store/local-store.js';

/**
 * The log lane (docs/performance.md "Noisy neighbours"): a task's log chunks do not take a seq when the pump delivers them. They wait
 * in the store's `log_queue`, and the outbox sender (outbox.ts) moves them into the outbox one *turn* at
 * a time, only when it has nothing else to send and the master has acknowledged most of what it was
 * sent. A turn is the oldest queued chunks of one execution, at most TURN_BYTES, merged into as few
 * messages as their offsets allow; executions take turns round-robin in id order. So:
 *   - an execution report (started, exited, cleaned) waits behind at most the in-flight log window, never
 *     behind another task's backlog;
 *   - every task that logs gets an equal share of the link, however much one of them writes;
 *   - the outbox holds only what is in flight; the backlog is the queue, bounded per task by the pump's
 *     cap (task-io/log-budget.ts).
 * The price: a task's own log chunks may follow its `exited` report when more than EXIT_LOG_BYTES of its
 * log were still queued at its exit (see `takeAllOf`); docs/worker-protocol.md says so.
 */

/** One log message's fields, before it becomes a `log` body. */
export interface LogPiece {
  readonly stream: 'stdout' | 'stderr';
  readonly offset: number;
  readonly data: string;
}

/** What one turn takes from the queue: its messages, and the queue position it ends at. */
export interface LogTurn {
  readonly pieces: readonly LogPiece[];
  readonly lastId: number;
}

/** Bytes of log one execution may move to the outbox per turn: one full chunk. */
export const TURN_BYTES = MAX_LOG_CHUNK_BYTES;
/** Queued chunks read per turn (many tiny chunks merge into one message). */
const TURN_ROWS = 256;
/** A task's log still queued at its exit goes ahead of its `exited` report when at most this many bytes. */
export const EXIT_LOG_BYTES = 1024 * 1024;

/**
 * The turn made of the oldest `chunks` (of one execution, in queue order): chunks are taken while the
 * turn stays within `maxBytes` (at least one), and each is merged into the previous message of its
 * stream when it continues it exactly and the message stays within MAX_LOG_CHUNK_BYTES. Null when
 * `chunks` is empty. Pure.
 */
export function coalesceLogChunks(chunks: readonly QueuedLogChunk[], maxBytes: number): LogTurn | null {
  const pieces: Array<{ stream: 'stdout' | 'stderr'; offset: number; data: string; bytes: number }> = [];
  const lastOf = new Map<'stdout' | 'stderr', number>();
  let total = 0;
  let lastId: number | null = null;
  for (const c of chunks) {
    const bytes = Buffer.byteLength(c.data);
    if (lastId !== null && total + bytes > maxBytes) break;
    total += bytes;
    lastId = c.id;
    const at = lastOf.get(c.stream);
    const prev = at === undefined ? undefined : pieces[at];
    // Offsets count raw bytes: only a chunk that starts where the previous one's bytes end can join it
    // (a lossy chunk, whose text is longer than its raw bytes, never does).
    if (prev && prev.offset + prev.bytes === c.offset && prev.bytes + bytes <= MAX_LOG_CHUNK_BYTES) {
      prev.data += c.data;
      prev.bytes += bytes;
    } else {
      lastOf.set(c.stream, pieces.length);
      pieces.push({ stream: c.stream, offset: c.offset, data: c.data, bytes });
    }
  }
  if (lastId === null) return null;
  return { pieces: pieces.map(({ stream, offset, data }) => ({ stream, offset, data })), lastId };
}

/** The queue side of the lane; see the module comment. Not thread-safe, like everything in the worker. */
export class LogLane {
  /** The execution whose turn was last: the next turn goes to the one after it. */
  private last = '';
  /**
   * False once a turn found the queue empty, until the next chunk is queued: the sender then skips the
   * transaction that would look for a turn (most pumps of a worker whose tasks log little). True at
   * first, since a previous worker process may have left chunks queued.
   */
  private maybeQueued = true;

  constructor(private readonly store: LocalStore) {}

  /** Queues one chunk from a pump (task-io/logs.ts). */
  queue(executionId: string, stream: 'stdout' | 'stderr', offset: number, data: string): void {
    this.store.queueLogChunk(executionId, stream, offset, data);
    this.maybeQueued = true;
  }

  /** Whether `takeTurn` may find anything: false only when the last turn found the queue empty since. */
  mayHaveTurn(): boolean {
    return this.maybeQueued;
  }

  /**
   * The next execution's turn, removed from the queue; empty when nothing is queued. Call inside the
   * transaction that appends the bodies to the outbox, so a chunk is never in neither or both.
   */
  takeTurn(): WorkerSequencedBody[] {
    const id = this.store.nextQueuedLogExecution(this.last);
    if (id === null) {
      this.maybeQueued = false;
      return [];
    }
    this.last = id;
    return this.take(id) ?? [];
  }

  /**
   * Everything still queued for `executionId` when that is at most `maxBytes` (its exit: the log of an
   * ordinary task then precedes its `exited` report); nothing otherwise, and the rest keeps its turns.
   * Same transaction rule as `takeTurn`.
   */
  takeAllOf(executionId: string, maxBytes: number = EXIT_LOG_BYTES): WorkerSequencedBody[] {
    // Reads at most one chunk past `maxBytes`, however much a flood left queued.
    const head = this.store.oldestQueuedLogChunks(executionId, Number.MAX_SAFE_INTEGER, maxBytes);
    if (head.reduce((sum, c) => sum + Buffer.byteLength(c.data), 0) > maxBytes) return [];
    const bodies: WorkerSequencedBody[] = [];
    for (let turn = this.take(executionId); turn !== null; turn = this.take(executionId))
      bodies.push(...turn);
    return bodies;
  }

  private take(executionId: string): WorkerSequencedBody[] | null {
    const turn = coalesceLogChunks(
      this.store.oldestQueuedLogChunks(executionId, TURN_ROWS, TURN_BYTES),
      TURN_BYTES,
    );
    if (turn === null) return null;
    this.store.removeQueuedLogChunksThrough(executionId, turn.lastId);
    return turn.pieces.map((p) => ({ type: 'log', execution_id: executionId, ...p }));
  }
}
