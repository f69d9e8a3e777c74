import { createWriteStream, type WriteStream } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { workerInputPath } from '../../src/contracts/paths.js';

/**
 * How the worker fetches an input blob of one of its executions from the master (ADR 0012): an HTTPS GET
 * on `/api/v1/executions/{execution_id}/inputs/{sha256}` with its worker token, trusting the same CA as
 * its WSS link. The master serves a blob only to the worker that runs an execution naming it, and only
 * before that execution starts; the worker verifies the sha256 of what it got either way
 * (inputs.ts).
 */

/**
 * Fetches the bytes named `sha256` for `executionId` into the new file `into` (created O_EXCL, 0600),
 * streamed: at most `maxBytes`; rejects with a message on any failure (the caller removes the file and
 * hashes it either way). `signal` stops it part-way (its execution was cancelled, or a backfilled run's
 * deadline came first): the connection is dropped and the fetch rejects.
 */
export type FetchBlob = (
  executionId: string,
  sha256: string,
  maxBytes: number,
  into: string,
  signal?: AbortSignal,
) => Promise<void>;

/** Where and how to fetch. */
export interface BlobFetchOptions {
  /** The master's base URL (https://…, http:// on loopback, or ws(s):// as the worker was given). */
  readonly masterUrl: string;
  readonly token: string;
  /** PEM of the CA that signed the master's certificate. */
  readonly ca?: string;
  /** How long the connection may stay silent (default 120 s); also the fixed part of the whole deadline. */
  readonly timeoutMs?: number;
  /**
   * The slowest body the worker waits for (default 1 MiB/s): the whole fetch must end within
   * `timeoutMs + maxBytes / minBytesPerSecond`, so a master that trickles a byte now and then cannot
   * hold the execution's setup (and its cards) for ever.
   */
  readonly minBytesPerSecond?: number;
}

/** An error answer's message is read up to this much; past it the answer is dropped. */
const ERROR_BODY_BYTES = 4096;

/** The fetcher for a master. */
export function httpsBlobFetcher(opts: BlobFetchOptions): FetchBlob {
  const base = opts.masterUrl
    .replace(/^ws(s?):\/\//, 'http$1://')
    .replace(/\/api\/v1\/workers\/connect$/, '');
  const idleMs = opts.timeoutMs ?? 120_000;
  const minRate = opts.minBytesPerSecond ?? 1024 * 1024;
  return (executionId, sha256, maxBytes, into, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted === true) {
        reject(new Error('stopped before it began'));
        return;
      }
      const deadlineMs = idleMs + Math.ceil((maxBytes / minRate) * 1000);
      const deadline = setTimeout(() => {
        req.destroy(new Error(`took longer than ${deadlineMs} ms for at most ${maxBytes} bytes`));
      }, deadlineMs);
      const stop = () => req.destroy(new Error('stopped part-way: its execution no longer needs it'));
      signal?.addEventListener('abort', stop, { once: true });
      const done = () => {
        clearTimeout(deadline);
        signal?.removeEventListener('abort', stop);
      };
      // The file `into`, once the answer is a success: a failure (the signal, a timeout, a dropped
      // connection) is answered only once the file is closed, so the caller's unlink is final (a write
      // stream still opening, or still writing, could otherwise create or fill it afterwards).
      let file: { readonly stream: WriteStream; readonly closed: Promise<void> } | undefined;
      const settle = {
        resolve: () => {
          done();
          resolve();
        },
        reject: (err: unknown) => {
          done();
          if (file === undefined) {
            reject(err);
            return;
          }
          file.stream.destroy();
          void file.closed.then(() => reject(err));
        },
      };
      const url = new URL(`${base.replace(/\/$/, '')}${workerInputPath(executionId, sha256)}`);
      const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
      const req = request(
        url,
        {
          method: 'GET',
          headers: { authorization: `Bearer ${opts.token}` },
          timeout: idleMs,
          ...(opts.ca === undefined ? {} : { ca: opts.ca }),
        },
        (res) => {
          if (res.statusCode !== 200) {
            // An error answer is read up to a few KiB, for its message; past that the connection is dropped.
            const chunks: Buffer[] = [];
            let size = 0;
            const fail = () =>
              settle.reject(
                new Error(
                  `the master answered ${res.statusCode}: ${Buffer.concat(chunks).toString('utf8').slice(0, 500)}`,
                ),
              );
            res.on('data', (chunk: Buffer) => {
              chunks.push(chunk);
              size += chunk.length;
              if (size >= ERROR_BODY_BYTES) {
                fail();
                req.destroy();
              }
            });
            res.on('end', fail);
            res.on('error', settle.reject);
            return;
          }
          // A success may not exceed the declared size; it streams into the file a piece at a time.
          let size = 0;
          const cap = new Transform({
            transform(chunk: Buffer, _enc, done) {
              size += chunk.length;
              if (size > maxBytes)
                done(new Error(`the master sent more than the ${maxBytes} bytes the spec declares`));
              else done(null, chunk);
            },
          });
          const stream = createWriteStream(into, { flags: 'wx', mode: 0o600 });
          file = { stream, closed: new Promise<void>((r) => stream.once('close', () => r())) };
          pipeline(res, cap, stream).then(settle.resolve, settle.reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no data for ${idleMs} ms`)));
      req.on('error', settle.reject);
      req.end();
    });
}
