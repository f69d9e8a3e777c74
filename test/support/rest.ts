import { randomUUID } from 'node:crypto';

/**
 * A small REST client for `/api/v1` and `/healthz`: fetch (trusting the master's CA) with an optional
 * bearer token. It never throws on an HTTP error status; tests assert on `status` and `body`.
 */

/** One response: status, headers and the parsed JSON body (or the raw text when it is not JSON). */
export interface RestResponse<T = Record<string, unknown>> {
  status: number;
  headers: Headers;
  body: T;
}

/** Options of a POST. */
export interface PostOptions {
  /** `Idempotency-Key` header; default a fresh UUID; null sends none. */
  idempotencyKey?: string | null;
  headers?: Record<string, string>;
}

/** REST calls with one token. */
export interface RestClient {
  get<T = Record<string, unknown>>(path: string, headers?: Record<string, string>): Promise<RestResponse<T>>;
  post<T = Record<string, unknown>>(
    path: string,
    body?: unknown,
    opts?: PostOptions,
  ): Promise<RestResponse<T>>;
  /** Any method, raw body (string) and headers, for malformed-request tests. */
  request<T = Record<string, unknown>>(
    method: string,
    path: string,
    init?: { body?: string; headers?: Record<string, string> },
  ): Promise<RestResponse<T>>;
}

/** A REST client for `baseUrl` sending `token` (null: no Authorization header). */
export function restClient(
  baseUrl: string,
  token: string | null,
  fetchFn: typeof globalThis.fetch,
): RestClient {
  const request = async <T>(
    method: string,
    path: string,
    init: { body?: string; headers?: Record<string, string> } = {},
  ): Promise<RestResponse<T>> => {
    const headers: Record<string, string> = { ...(init.headers ?? {}) };
    if (token !== null) headers['authorization'] = `Bearer ${token}`;
    const res = await fetchFn(new URL(path, baseUrl), {
      method,
      headers,
      ...(init.body !== undefined ? { body: init.body } : {}),
    });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      // Not JSON: keep the text.
    }
    return { status: res.status, headers: res.headers, body: body as T };
  };
  return {
    get: (path, headers) => request('GET', path, headers ? { headers } : {}),
    post: (path, body = {}, opts = {}) => {
      const headers: Record<string, string> = { 'content-type': 'application/json', ...(opts.headers ?? {}) };
      const key = opts.idempotencyKey === undefined ? randomUUID() : opts.idempotencyKey;
      if (key !== null) headers['idempotency-key'] = key;
      return request('POST', path, { body: JSON.stringify(body), headers });
    },
    request,
  };
}
