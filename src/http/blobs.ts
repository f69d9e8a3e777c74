import { createHash, randomUUID } from 'node:crypto';
import { closeSync, createWriteStream, mkdirSync, openSync, readSync, rmSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import type { StorageReservation } from '../broker/ports.js';
import { inputFetcherWorker, requireUploader } from '../broker/principals.js';
import { admitBlobUpload, blobForExecution, digestMismatch, putBlob } from '../broker/tools/inputs.js';
import { BrokerError } from '../contracts/errors.js';
import { WORKER_INPUT_ROUTE } from '../contracts/paths.js';
import { continueNow } from './expect-continue.js';
import { UploadPace } from './upload-pace.js';

/**
 * The two byte routes of inputs (ADR 0012), beside the JSON REST mirror:
 *
 *   PUT /api/v1/blobs/{sha256}          a submitter uploads raw bytes (larger files, the CLI); the server
 *                                       recomputes the digest and refuses a mismatch. Content-addressed,
 *                                       so naturally idempotent: no Idempotency-Key.
 *   GET /api/v1/executions/{execution_id}/inputs/{sha256}
 *                                       a worker fetches an input of one of its own executions, with its
 *                                       worker token (auth.ts lets worker tokens in here and nowhere else
 *                                       but the WSS endpoint). Streamed a store chunk at a time, hashed
 *                                       as it goes; a blob that does not match is cut off.
 *
 * An upload is streamed, never buffered while it arrives (docs/performance.md "Noisy neighbours"). Before a byte of the body
 * is read the route checks, in order: the digest's form, the role (the broker's `requireUploader`; a
 * fetch's worker token, `inputFetcherWorker`), `Content-Length` (required; over
 * `policy.max_input_bytes` is 413), the principal's quota, the principal's uploads in flight
 * (`http.max_uploads_per_principal`, else 429 TOO_MANY_UPLOADS), and reserves disk space with the
 * storage guard. A principal's bodies together stream at most `http.upload_bytes_per_second_per_principal`
 * (upload-pace.ts: past it a body is paused, not buffered), so one token's uploads take a bounded share
 * of the event loop. Then the body streams through a sha256 into a temporary file in the data dir
 * (`<data-dir>/uploads/`); a wrong digest is refused (DIGEST_MISMATCH) having held one stream buffer
 * in memory. Only bytes that hash to their name are read back, in one synchronous step, into the store
 * (blobs live in SQLite: docs/decisions/0012-input-blobs-in-sqlite.md), so at most one verified
 * upload's bytes are in memory at a time. Any refusal before the body was read closes the connection
 * (src/http/connection-limits.ts) instead of reading the body to its end.
 */

const SHA256 = /^[0-9a-f]{64}$/;

/**
 * Disk one upload may take at its peak, per declared byte: the temporary file, the SQLite WAL frames
 * of the insert, and the page in the database file the checkpoint copies them to.
 */
export const UPLOAD_DISK_FACTOR = 3;

/** Settings of the byte routes. */
export interface BlobRouteOptions {
  /** Where bodies stream to before they are verified; emptied at start. */
  uploadDir: string;
  /** Uploads one principal may have in flight. */
  maxUploadsPerPrincipal: number;
  /** Body bytes per second one principal's uploads may take together (upload-pace.ts); 0: no bound. */
  uploadBytesPerSecond: number;
}

/** Uploads in flight per principal: how many, and the bytes they declared. */
class UploadSlots {
  private readonly open = new Map<string, { count: number; bytes: number }>();
  constructor(private readonly max: number) {}

  /** Bytes the principal's uploads in flight declared. */
  bytesOf(principalId: string): number {
    return this.open.get(principalId)?.bytes ?? 0;
  }

  /** Takes a slot for `principalId` or throws TOO_MANY_UPLOADS; returns its release (idempotent). */
  take(principalId: string, bytes: number): () => void {
    const held = this.open.get(principalId) ?? { count: 0, bytes: 0 };
    if (held.count >= this.max)
      throw new BrokerError(
        'TOO_MANY_UPLOADS',
        `${held.count} uploads of this token are in flight; at most ${this.max} at a time (http.max_uploads_per_principal)`,
        'Wait for one of your uploads to finish, then retry this one.',
        { in_flight: held.count, limit: this.max },
      );
    this.open.set(principalId, { count: held.count + 1, bytes: held.bytes + bytes });
    let holding = true;
    return () => {
      if (!holding) return;
      holding = false;
      const now = this.open.get(principalId) ?? { count: 1, bytes };
      if (now.count > 1) this.open.set(principalId, { count: now.count - 1, bytes: now.bytes - bytes });
      else this.open.delete(principalId);
    };
  }
}

/** The declared body size: `Content-Length` is required (no chunked bodies). */
function declaredLength(req: FastifyRequest): number {
  const raw = req.headers['content-length'];
  if (req.headers['transfer-encoding'] !== undefined || raw === undefined || !/^\d{1,15}$/.test(raw))
    throw new BrokerError(
      'INVALID_INPUT',
      'an upload needs a Content-Length header (no chunked bodies)',
      'Send the file as the body with its length; fetch, curl -T and the CLI do so.',
    );
  return Number(raw);
}

/** Bytes of body gathered before one write to the upload's temporary file. */
const WRITE_RUN_BYTES = 256 * 1024;

/** Streams `raw` into a new file at `path`, hashing it; throws unless exactly `declared` bytes came. */
async function receive(
  raw: IncomingMessage,
  path: string,
  declared: number,
  pace: (bytes: number) => number,
): Promise<string> {
  const hash = createHash('sha256');
  let received = 0;
  // A TLS socket hands the body over in pieces of at most one record (16 KiB); writing each to the file
  // cost the master's event loop about 4 times what 256 KiB writes cost (docs/performance.md, upload
  // flood). The pieces are hashed as they come and written in runs of WRITE_RUN_BYTES: one more buffer.
  let run: Buffer[] = [];
  let runBytes = 0;
  const takeRun = () => {
    const out = Buffer.concat(run, runBytes);
    run = [];
    runBytes = 0;
    return out;
  };
  const hashing = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      received += chunk.length;
      run.push(chunk);
      runBytes += chunk.length;
      const next = () => (runBytes >= WRITE_RUN_BYTES ? done(null, takeRun()) : done());
      // Past the principal's byte rate: hold this piece, so the socket is not read meanwhile.
      const wait = pace(chunk.length);
      if (wait > 0) setTimeout(next, wait);
      else next();
    },
    flush(done) {
      done(null, runBytes > 0 ? takeRun() : undefined);
    },
  });
  // Whatever closes the connection ends the read (a cut after its answer, a peer gone): a request whose
  // socket closed once its answer was written is never ended by Node itself.
  const socket = raw.socket as Socket | null;
  if (socket === null || socket.destroyed) throw bodyEnded(received, declared);
  const onClose = () => raw.destroy();
  socket.once('close', onClose);
  const file = createWriteStream(path, { flags: 'wx', mode: 0o600 });
  let writeError: NodeJS.ErrnoException | undefined;
  file.once('error', (err) => {
    writeError = err;
  });
  try {
    await pipeline(raw, hashing, file);
  } catch {
    // The master's own failure to write (disk full, a damaged upload dir) is not the client's short body.
    if (writeError !== undefined) throw uploadNotWritten(writeError);
    throw bodyEnded(received, declared);
  } finally {
    socket.off('close', onClose);
  }
  if (received !== declared) throw bodyEnded(received, declared);
  return hash.digest('hex');
}

/** Removes an upload's temporary file; a failure is logged, never thrown (the answer is already decided). */
function removeUpload(tmp: string, log: FastifyBaseLogger): void {
  try {
    rmSync(tmp, { force: true });
  } catch (err) {
    log.warn({ err, file: tmp }, 'an upload temporary file could not be removed');
  }
}

function uploadNotWritten(err: NodeJS.ErrnoException): BrokerError {
  return new BrokerError(
    'UNAVAILABLE',
    `the master could not write the upload: ${err.code ?? err.message}`,
    'Retry later; an operator should check the master data dir (free space, permissions).',
  );
}

function bodyEnded(received: number, declared: number): BrokerError {
  return new BrokerError(
    'INVALID_INPUT',
    `the body ended after ${received} of its ${declared} declared bytes`,
    'Send the whole file; nothing was stored.',
  );
}

/** Registers the routes. */
export function registerBlobRoutes(app: FastifyInstance, deps: BrokerDeps, opts: BlobRouteOptions): void {
  // Leftovers of a master that stopped mid-upload are unverified bytes: gone at start.
  rmSync(opts.uploadDir, { recursive: true, force: true });
  mkdirSync(opts.uploadDir, { recursive: true, mode: 0o700 });
  const slots = new UploadSlots(opts.maxUploadsPerPrincipal);
  const pace = new UploadPace(opts.uploadBytesPerSecond);
  // In its own scope: the body is left unread for the handler, whatever its content type.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null));
    scope.put<{ Params: { sha256: string } }>(
      '/api/v1/blobs/:sha256',
      { config: { continueInHandler: true } },
      async (req, reply) => {
        const { sha256 } = req.params;
        if (!SHA256.test(sha256))
          throw new BrokerError(
            'INVALID_INPUT',
            `${sha256} is not a sha256`,
            'Use the lowercase hex sha256 of the bytes.',
          );
        const principal = req.principal!;
        requireUploader(principal);
        const declared = declaredLength(req);
        admitBlobUpload(deps, principal, sha256, declared, slots.bytesOf(principal.id));
        const release = slots.take(principal.id, declared);
        const tmp = join(opts.uploadDir, randomUUID());
        let reservation: StorageReservation | undefined;
        let written = 0;
        try {
          reservation = deps.storage?.reserve('input upload', declared * UPLOAD_DISK_FACTOR);
          // Admitted, with room reserved: a client waiting on `Expect: 100-continue` may send the body
          // now (expect-continue.ts).
          continueNow(req, reply);
          // Monotonic time, as the timers that carry out the waits: a wall clock that jumps (or a test's
          // frozen one) would turn into waits of any length.
          const actual = await receive(req.raw, tmp, declared, (bytes) =>
            pace.take(principal.id, bytes, performance.now()),
          );
          if (actual !== sha256) throw digestMismatch(sha256, actual);
          const result = deps.store.transaction(() =>
            putBlob(deps, principal, sha256, actual, { size: declared, pieces: () => filePieces(tmp) }),
          );
          if (result.stored) written = declared;
          return result;
        } finally {
          // Releases first: none of them may be skipped by a temporary file that cannot be removed.
          reservation?.release(written);
          release();
          pace.sweep(performance.now());
          removeUpload(tmp, req.log);
        }
      },
    );
  });
  app.get<{ Params: { execution_id: string; sha256: string } }>(WORKER_INPUT_ROUTE, async (req, reply) => {
    const workerId = inputFetcherWorker(req.principal!);
    const blob = blobForExecution(deps, workerId, req.params.execution_id, req.params.sha256);
    // The first piece before the headers: a blob of one piece (up to a store chunk) that does not match
    // is a plain 500 here, not a cut-off body. Then a store chunk per read (highWaterMark 1: the next is
    // read only once the socket has taken the last), so a 1 GiB input holds a chunk of memory and the
    // event loop turns between chunks.
    const pieces = blob.pieces[Symbol.iterator]();
    const first = pieces.next();
    const body = Readable.from(
      (function* () {
        if (first.done) return;
        yield first.value;
        yield* { [Symbol.iterator]: () => pieces };
      })(),
      { objectMode: false, highWaterMark: 1 },
    );
    return reply
      .header('Content-Type', 'application/octet-stream')
      .header('Content-Length', String(blob.size))
      .send(body);
  });
}

/** A file's bytes a MiB at a time (the upload's temporary file, into the store's chunks). */
function* filePieces(path: string): Generator<Buffer> {
  const fd = openSync(path, 'r');
  try {
    for (;;) {
      const buf = Buffer.allocUnsafe(1024 * 1024);
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) return;
      yield buf.subarray(0, n);
    }
  } finally {
    closeSync(fd);
  }
}
