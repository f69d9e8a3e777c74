import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { BrokerError, type ErrorBody } from '../../contracts/errors.js';
import { createCaTrustingFetch } from '../../platform/ca-fetch.js';
import type { CliIo } from './io.js';

/**
 * How CLI commands talk to a running master: REST over HTTPS with a bearer token, trusting the master's
 * CA. Connection settings come from flags, then GPU_BROKER_URL / GPU_BROKER_TOKEN(_FILE) / GPU_BROKER_CA_FILE.
 */

/** A connected client. */
export interface MasterClient {
  /**
   * GET a JSON document. With `maxBytes`, a body longer than that is not read on: the call fails with
   * PAYLOAD_TOO_LARGE as soon as more arrives (a lying master cannot make the CLI buffer without bound).
   */
  get<T = unknown>(path: string, opts?: { maxBytes?: number }): Promise<T>;
  post<T = unknown>(path: string, body: unknown): Promise<T>;
  /** PUT raw bytes (application/octet-stream), e.g. an input blob. */
  putBytes<T = unknown>(path: string, bytes: Uint8Array): Promise<T>;
  close(): Promise<void>;
}

/** Settings resolved from flags and environment. */
export interface RemoteSettings {
  url: string;
  token: string;
  caFile?: string | undefined;
}

/** Resolves connection settings; throws a clear error for what is missing. */
export function remoteSettings(values: Record<string, unknown>, io: CliIo): RemoteSettings {
  const url = (values['url'] as string | undefined) ?? io.env['GPU_BROKER_URL'];
  if (!url)
    throw new BrokerError(
      'INVALID_INPUT',
      'no master URL',
      'Pass --url https://host:8443 or set GPU_BROKER_URL.',
    );
  let token = (values['token'] as string | undefined) ?? undefined;
  const tokenFile = (values['token-file'] as string | undefined) ?? io.env['GPU_BROKER_TOKEN_FILE'];
  if (!token && tokenFile) token = readFileSync(tokenFile, 'utf8').trim();
  token ??= io.env['GPU_BROKER_TOKEN'];
  if (!token)
    throw new BrokerError(
      'INVALID_INPUT',
      'no token',
      'Pass --token-file FILE, set GPU_BROKER_TOKEN_FILE=FILE, or set GPU_BROKER_TOKEN.',
    );
  const caFile = (values['ca-file'] as string | undefined) ?? io.env['GPU_BROKER_CA_FILE'];
  return { url: url.replace(/\/+$/, ''), token, caFile };
}

/** Opens a client for the settings; `signal` aborts every call in flight (e.g. on Ctrl-C). */
export function connectMaster(s: RemoteSettings, signal?: AbortSignal): MasterClient {
  const trusting = s.caFile ? createCaTrustingFetch(readFileSync(s.caFile, 'utf8')) : null;
  const doFetch = trusting?.fetch ?? globalThis.fetch;
  const call = async <T>(method: string, path: string, body?: unknown, maxBytes?: number): Promise<T> => {
    const headers: Record<string, string> = { authorization: `Bearer ${s.token}` };
    if (method === 'POST') {
      headers['content-type'] = 'application/json';
      headers['idempotency-key'] = randomUUID();
    }
    if (method === 'PUT') headers['content-type'] = 'application/octet-stream';
    let res: Response;
    try {
      res = await doFetch(`${s.url}${path}`, {
        method,
        headers,
        ...(signal ? { signal } : {}),
        ...(method === 'POST' ? { body: JSON.stringify(body ?? {}) } : {}),
        ...(method === 'PUT' ? { body: body as Uint8Array } : {}),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new BrokerError(
        'UNAVAILABLE',
        `cannot reach ${s.url}: ${cause?.code ?? cause?.message ?? (err as Error).message}`,
        cause?.code?.includes('CERT') || cause?.code?.includes('SIGNATURE')
          ? 'Pass --ca-file with the master’s CA (printed at start).'
          : 'Is the master running at that URL?',
      );
    }
    const text = maxBytes === undefined ? await res.text() : await boundedText(res, maxBytes, path);
    const json = text ? (JSON.parse(text) as unknown) : {};
    if (!res.ok) {
      const e = (json as { error?: ErrorBody }).error;
      throw new BrokerError(
        e?.code ?? 'INTERNAL',
        e?.message ?? `HTTP ${res.status}`,
        e?.hint ?? '',
        e?.details,
      );
    }
    return json as T;
  };
  return {
    get: (path, opts) => call('GET', path, undefined, opts?.maxBytes),
    post: (path, body) => call('POST', path, body),
    putBytes: (path, bytes) => call('PUT', path, bytes),
    close: async () => {
      await trusting?.close();
    },
  };
}

/** A response's body as text, failing as soon as it passes `maxBytes` (what was read so far is dropped). */
async function boundedText(res: Response, maxBytes: number, path: string): Promise<string> {
  const tooLarge = () =>
    new BrokerError(
      'PAYLOAD_TOO_LARGE',
      `the master's answer to GET ${path.split('?')[0]} is longer than the ${maxBytes} bytes it can be`,
      'The master sent more than it was asked for; try again, and tell its operator if it persists.',
    );
  if (Number(res.headers.get('content-length') ?? 0) > maxBytes) {
    await res.body?.cancel();
    throw tooLarge();
  }
  const reader = res.body?.getReader();
  if (!reader) return '';
  const parts: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (n > maxBytes) {
      await reader.cancel();
      throw tooLarge();
    }
    parts.push(value);
  }
  return Buffer.concat(parts).toString('utf8');
}

/** Runs `fn` with a connected client and closes it afterwards. */
export async function withMaster<T>(
  values: Record<string, unknown>,
  io: CliIo,
  fn: (c: MasterClient) => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  const client = connectMaster(remoteSettings(values, io), signal);
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}
