import { createWriteStream, type WriteStream } from 'node:fs';
import type { Readable } from 'node:stream';
import {
  DEFAULT_MAX_LOG_BYTES_PER_TASK,
  logTruncatedMarker,
  MAX_LOG_CHUNK_BYTES,
} from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import { LogBudget } from './log-budget.js';

/**
 * Copies one output stream of a task (stdout or stderr) into its log file and hands it, in chunks of at
 * most MAX_LOG_CHUNK_BYTES, to a callback that streams it to the master.
 *
 * Chunks are cut on UTF-8 character boundaries, so a multi-byte character is never split between two
 * chunks. `data` is the UTF-8 decoding of the chunk: output that is not valid UTF-8 (binary) arrives with
 * U+FFFD replacement characters, so it is a lossy view; `offset` is always the byte offset of the chunk in
 * the stream, which equals its offset in the log file, where the exact bytes are kept.
 *
 * Both streams of a task share a budget (log-budget.ts): past the task's cap, a stream's file and
 * callback get one marker line and nothing more, while the pipe is still read to its end, so the task
 * never blocks on a full pipe because of the cap, and the worker's disk holds at most the cap.
 */

/** Which stream of the task. */
export type LogStreamName = 'stdout' | 'stderr';

/** Receives one chunk: the stream, the byte offset of its first byte, and its text. */
export type LogChunkHandler = (stream: LogStreamName, offset: number, data: string) => void;

/** What a pump reports when it has finished. */
export interface LogPumpSummary {
  /** Bytes read from the task. */
  readonly bytes: number;
  /** Bytes read and dropped past the task's log cap. */
  readonly dropped: number;
  /** Why the log file or the callback failed, if it did; the task is never disturbed by it. */
  readonly errors: readonly string[];
}

/** A running copy of one stream; see the module comment. */
export interface LogPump {
  /** Settles when the stream has ended (or been aborted) and the log file is flushed and closed. */
  readonly finished: Promise<LogPumpSummary>;
  /** Stops reading, e.g. when a process that escaped the group still holds the pipe open. */
  abort(): void;
}

/**
 * Starts copying `source` into `filePath` and to `onChunk`, within `budget` (shared by the task's two
 * pumps; a budget of its own at the default cap otherwise). Never throws; failures land in `errors`.
 */
export function startLogPump(
  stream: LogStreamName,
  source: Readable,
  filePath: string,
  onChunk: LogChunkHandler,
  budget: LogBudget = new LogBudget(DEFAULT_MAX_LOG_BYTES_PER_TASK),
): LogPump {
  const errors: string[] = [];
  let bytes = 0;
  let carry: Buffer = Buffer.alloc(0);
  const file = openLogFile(stream, source, filePath, errors);
  const deliverAll = chunkDelivery(stream, onChunk, errors);

  source.on('data', (piece: Buffer) => {
    bytes += piece.length;
    // Past the cap nothing is written or delivered: the pipe is drained at full speed, never paused.
    const { keep, marker } = budget.take(stream, piece.length);
    if (keep === 0 && !marker) return;
    const data = keep === piece.length ? piece : piece.subarray(0, keep);
    if (keep > 0) file.write(data);
    const pending = carry.length > 0 ? Buffer.concat([carry, data]) : data;
    if (marker) {
      // The cut may fall inside a character: what is kept is delivered as is, then the one marker line.
      const line = Buffer.from(logTruncatedMarker(budget.cap));
      file.write(line);
      deliverAll(Buffer.concat([pending, line]));
      carry = Buffer.alloc(0);
      return;
    }
    const tail = incompleteTailLength(pending);
    deliverAll(pending.subarray(0, pending.length - tail));
    carry = Buffer.from(pending.subarray(pending.length - tail));
  });

  const finished = new Promise<LogPumpSummary>((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      // A truncated character at the very end is delivered as is (decoded lossily).
      if (carry.length > 0) deliverAll(carry);
      carry = Buffer.alloc(0);
      const dropped = budget.dropped(stream);
      if (dropped > 0)
        errors.push(`${stream}: ${dropped} bytes past the task's log cap of ${budget.cap} bytes dropped`);
      file.close(() => resolve({ bytes, dropped, errors }));
    };
    source.once('end', finish);
    source.once('close', finish);
    source.once('error', (err) => {
      errors.push(`${stream} pipe: ${err.message}`);
      finish();
    });
    // A pipe that closed before the pump listened emits neither event again: finish now, or the task's
    // teardown (drainPumps) would wait for it for ever.
    if (source.closed || source.readableEnded) finish();
  });

  return {
    finished,
    abort: () => {
      source.destroy();
    },
  };
}

/** The log file of one stream; see `openLogFile`. */
interface LogFile {
  /** Writes unless the file failed; pauses `source` while the disk is behind. */
  write(data: Buffer): void;
  /** Ends the file; `settle` runs once it is closed (at once when it already is, or was never made). */
  close(settle: () => void): void;
}

/**
 * The file for one stream's bytes, made on the first byte: a task that prints nothing leaves no file
 * (two files made and later removed per quiet task were a fifth of a sandboxed task's
 * file system work). Made with O_EXCL, so it is never a file or link that was there before, and never
 * opened through one. A failure stops the file, never the pipe (see `errors`).
 */
function openLogFile(stream: LogStreamName, source: Readable, filePath: string, errors: string[]): LogFile {
  let fileOk = true;
  let file: WriteStream | null = null;
  const made = (): WriteStream => {
    const f = createWriteStream(filePath, { flags: 'wx' });
    f.on('error', (err) => {
      // A full disk must not stall or kill the task: stop writing the file, keep draining the pipe.
      if (fileOk) errors.push(`${stream}.log: ${err.message}`);
      fileOk = false;
      source.resume();
    });
    return f;
  };
  return {
    write: (data) => {
      if (!fileOk) return;
      file ??= made();
      if (!file.write(data)) {
        // Backpressure: a task that writes faster than the disk waits, instead of the worker's memory.
        source.pause();
        file.once('drain', () => source.resume());
      }
    },
    close: (settle) => {
      // 'close' follows both a clean finish and a failure; a stream that already closed won't repeat it.
      if (file === null || file.closed || file.destroyed) settle();
      else {
        file.once('close', settle);
        file.end();
      }
    },
  };
}

/**
 * Hands bytes to `onChunk` in chunks of at most MAX_LOG_CHUNK_BYTES cut on character boundaries, each
 * with its byte offset in the stream. A callback that throws gets nothing more (its error lands in
 * `errors`); offsets still count, since the file has everything.
 */
function chunkDelivery(
  stream: LogStreamName,
  onChunk: LogChunkHandler,
  errors: string[],
): (buf: Buffer) => void {
  let delivered = 0;
  let callbackFailed = false;
  const deliver = (chunk: Buffer): void => {
    const offset = delivered;
    delivered += chunk.length;
    if (callbackFailed) return;
    try {
      onChunk(stream, offset, chunk.toString('utf8'));
    } catch (err) {
      // A broken consumer must not take the executor down; the file still has everything.
      callbackFailed = true;
      errors.push(`${stream} log callback failed: ${errorMessage(err)}`);
    }
  };
  return (buf) => {
    let start = 0;
    while (buf.length - start > MAX_LOG_CHUNK_BYTES) {
      const end = charBoundaryAtOrBefore(buf, start + MAX_LOG_CHUNK_BYTES, start);
      deliver(buf.subarray(start, end));
      start = end;
    }
    if (start < buf.length) deliver(buf.subarray(start));
  };
}

/**
 * The largest index `i` in (min, at] such that `buf[i]` starts a character, so `buf[..i)` holds whole
 * characters; `at` itself when the bytes there are not valid UTF-8 (nothing to protect).
 */
function charBoundaryAtOrBefore(buf: Buffer, at: number, min: number): number {
  for (let i = at, back = 0; i > min && back <= 3; i--, back++) {
    if (((buf[i] ?? 0) & 0xc0) !== 0x80) return i;
  }
  return at;
}

/**
 * How many bytes at the end of `buf` are the start of a character whose remaining bytes have not come
 * yet. Also used by the Slurm job's log tail (slurm/job-outcome.ts).
 */
export function incompleteTailLength(buf: Buffer): number {
  const n = buf.length;
  for (let back = 1; back <= Math.min(3, n); back++) {
    const b = buf[n - back] ?? 0;
    if ((b & 0xc0) === 0x80) continue;
    const need = b < 0xc0 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : b < 0xf8 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}
