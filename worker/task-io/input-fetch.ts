import { createWriteStream } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { workerInputPath } from '../../src/contracts/paths.js';

/**
 * How the worker fetches an input blob of one of its executions from the master (issue 13): an HTTPS GET
 * on `/api/v1/executions/{execution_id}/inputs/{sha256}` with its worker token, trusting the same CA as
 * its WSS link. The master serves a blob only to the worker that runs an execution naming it, and only
 * before that execution starts; the worker verifies the sha256 of what it got either way
 * (inputs.ts).
 */

/**
 * Fetches the bytes named `sha256` for `executionId` into the new file `into` (created O_EXCL, 0600),
 * streamed: at most `maxBytes`; rejects with a message on any failure (the caller removes the file and
 * hashes it either way).
 */
export type FetchBlob = (
  executionId: string,
  sha256: string,
  maxBytes: number,
  into: string,
) => Promise<void>;

/** Where and how to fetch. */
export interface BlobFetchOptions {
  /** The master's base URL (https://…, http:// on loopback, or ws(s):// as the worker was given). */
  readonly masterUrl: string;
  readonly token: string;
  /** PEM of the CA that signed the master's certificate. */
  readonly ca?: string;
  /** Per-request timeout (default 120 s). */
  readonly timeoutMs?: number;
}

/** The fetcher for a master. */
export function httpsBlobFetcher(opts: BlobFetchOptions): FetchBlob {
  const base = opts.masterUrl
    .replace(/^ws(s?):\/\//, 'http$1://')
    .replace(/\/api\/v1\/workers\/connect$/, '');
  return (executionId, sha256, maxBytes, into) =>
    new Promise<void>((resolve, reject) => {
      const url = new URL(`${base.replace(/\/$/, '')}${workerInputPath(executionId, sha256)}`);
      const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
      const req = request(
        url,
        {
          method: 'GET',
          headers: { authorization: `Bearer ${opts.token}` },
          timeout: opts.timeoutMs ?? 120_000,
          ...(opts.ca === undefined ? {} : { ca: opts.ca }),
        },
        (res) => {
          if (res.statusCode !== 200) {
            // An error answer is read up to a few KiB, for its message.
            const chunks: Buffer[] = [];
            let size = 0;
            res.on('data', (chunk: Buffer) => {
              if (size < 4096) chunks.push(chunk);
              size += chunk.length;
            });
            res.on('end', () =>
              reject(
                new Error(
                  `the master answered ${res.statusCode}: ${Buffer.concat(chunks).toString('utf8').slice(0, 500)}`,
                ),
              ),
            );
            res.on('error', reject);
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
          pipeline(res, cap, createWriteStream(into, { flags: 'wx', mode: 0o600 })).then(resolve, reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.on('error', reject);
      req.end();
    });
}
