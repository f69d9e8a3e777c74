import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { workerInputPath } from '../../src/contracts/paths.js';

/**
 * How the worker fetches an input blob of one of its executions from the master (issue 13): an HTTPS GET
 * on `/api/v1/executions/{execution_id}/inputs/{sha256}` with its worker token, trusting the same CA as
 * its WSS link. The master serves a blob only to the worker that runs an execution naming it, and only
 * before that execution starts; the worker verifies the sha256 of what it got either way
 * (inputs.ts).
 */

/** Fetches the bytes named `sha256` for `executionId`; rejects with a message on any failure. */
export type FetchBlob = (executionId: string, sha256: string, maxBytes: number) => Promise<Buffer>;

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
  return (executionId, sha256, maxBytes) =>
    new Promise<Buffer>((resolve, reject) => {
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
          const chunks: Buffer[] = [];
          let size = 0;
          // A success may not exceed the declared size; an error answer is read up to a few KiB.
          const limit = res.statusCode === 200 ? maxBytes : 4096;
          res.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > limit) {
              res.destroy();
              reject(new Error(`the master sent more than the ${maxBytes} bytes the spec declares`));
              return;
            }
            chunks.push(chunk);
          });
          res.on('end', () => {
            const body = Buffer.concat(chunks);
            if (res.statusCode === 200) resolve(body);
            else
              reject(
                new Error(`the master answered ${res.statusCode}: ${body.toString('utf8').slice(0, 500)}`),
              );
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.on('error', reject);
      req.end();
    });
}
