import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { errorCode, openRaw, type RawConnection, requestHead } from '../../support/raw-http.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/performance.md "Noisy neighbours" with a real master on loopback (plain HTTP, raw sockets): a body trickled or
 * stalled is cut with 408 REQUEST_TIMEOUT; a connection that never sends its headers is closed; an
 * answer to a request without a valid token closes its connection; one peer address cannot hold more
 * than `max_connections_per_peer` connections, and a client on another address is served meanwhile.
 */

let m: TestMaster;
let token: string;

beforeAll(async () => {
  m = await startTestMaster({
    config: {
      tls: { mode: 'off' },
      http: {
        body_timeout_ms: 500,
        min_body_bytes_per_second: 10_000,
        headers_timeout_ms: 1000,
        keep_alive_timeout_ms: 5000,
      },
    },
  });
  token = m.createToken('alice', ['submitter']);
});

afterAll(async () => {
  await m?.close();
});

const proposalHead = (bearer: string | null, length: number) =>
  requestHead('POST', '/api/v1/proposals', {
    ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
    'content-type': 'application/json',
    'idempotency-key': m.key(),
    'content-length': length,
  });

/** Sends one byte every `everyMs` until the socket closes. */
function trickle(c: RawConnection, everyMs: number): () => void {
  const timer = setInterval(() => {
    if (!c.isClosed()) c.socket.write(' ');
  }, everyMs);
  return () => clearInterval(timer);
}

describe('bodies', () => {
  it('a body trickled under the minimum rate is cut with 408 REQUEST_TIMEOUT', async () => {
    const c = await openRaw(m.url);
    c.socket.write(proposalHead(token, 100_000));
    const stop = trickle(c, 50); // 20 bytes/s: never idle, far under 10 kB/s
    const started = Date.now();
    try {
      const r = await c.response;
      expect(r.status).toBe(408);
      expect(errorCode(r)).toBe('REQUEST_TIMEOUT');
      expect(r.headers['connection']).toBe('close');
      await c.closed;
    } finally {
      stop();
    }
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('a body that stops arriving is cut', async () => {
    const c = await openRaw(m.url);
    c.socket.write(proposalHead(token, 1000));
    c.socket.write('{"spec":');
    const r = await c.response;
    expect(errorCode(r)).toBe('REQUEST_TIMEOUT');
    await c.closed;
  });

  it('without a token, a declared body is not waited for: 401 and the connection closes', async () => {
    const c = await openRaw(m.url);
    c.socket.write(proposalHead(null, 1_000_000));
    const r = await c.response;
    expect(r.status).toBe(401);
    expect(r.headers['connection']).toBe('close');
    await c.closed;
  });

  it('a body at a normal rate is not cut', async () => {
    const body = JSON.stringify({ spec: { nonsense: true } });
    const c = await openRaw(m.url);
    c.socket.write(proposalHead(token, body.length));
    c.socket.write(body);
    const r = await c.response;
    expect(r.status).toBe(400); // the schema refuses it: it was read and parsed
    c.socket.destroy();
  });
});

describe('connections', () => {
  it('a connection that never sends its headers is closed after headers_timeout_ms', async () => {
    const c = await openRaw(m.url);
    c.socket.write('GET /api/v1/status HTTP/1.1\r\n');
    await c.closed;
  });

  it('an answer without a valid token closes the connection; with one it stays open', async () => {
    const anon = await openRaw(m.url);
    anon.socket.write(requestHead('GET', '/api/v1/status', {}));
    const r = await anon.response;
    expect(r.status).toBe(401);
    expect(r.headers['connection']).toBe('close');
    await anon.closed;

    const health = await openRaw(m.url);
    health.socket.write(requestHead('GET', '/healthz', {}));
    expect((await health.response).headers['connection']).toBe('close');
    await health.closed;

    const authed = await openRaw(m.url);
    authed.socket.write(requestHead('GET', '/api/v1/status', { authorization: `Bearer ${token}` }));
    const ok = await authed.response;
    expect(ok.status).toBe(200);
    expect(ok.headers['connection']).toBe('keep-alive');
    await new Promise((res) => setTimeout(res, 200));
    expect(authed.isClosed()).toBe(false);
    authed.socket.destroy();
  });
});

describe('one peer address', () => {
  let capped: TestMaster;
  beforeAll(async () => {
    capped = await startTestMaster({
      config: { tls: { mode: 'off' }, http: { max_connections_per_peer: 100, headers_timeout_ms: 60_000 } },
    });
  });
  afterAll(async () => {
    await capped?.close();
  });

  it('holds at most max_connections_per_peer of 1,000 connections; another address is served', async () => {
    const flood = await Promise.all(Array.from({ length: 1000 }, () => openRaw(capped.url, '127.0.0.2')));
    await waitFor(() => flood.filter((c) => c.isClosed()).length >= 900, { what: 'the excess closed' });
    await new Promise((res) => setTimeout(res, 200));
    const open = flood.filter((c) => !c.isClosed());
    expect(open.length).toBe(100);
    // The held ones are real connections: one of them is still answered.
    const held = open[0]!;
    held.socket.write(requestHead('GET', '/healthz', {}));
    expect((await held.response).status).toBe(200);
    // Someone else (127.0.0.1) is served meanwhile.
    const other = capped.createToken('bob', ['submitter']);
    const res = await capped.rest(other).get('/api/v1/status');
    expect(res.status).toBe(200);
    for (const c of flood) c.socket.destroy();
    // Once they are gone, the address may connect again.
    await waitFor(
      async () => {
        const again = await openRaw(capped.url, '127.0.0.2');
        again.socket.write(requestHead('GET', '/healthz', {}));
        const ok = await again.response.then(
          (r) => r.status === 200,
          () => false,
        );
        again.socket.destroy();
        return ok;
      },
      { what: 'the address served again' },
    );
  }, 60_000);
});

describe('with TLS', () => {
  it('the per-peer cap holds before the TLS handshake', async () => {
    const tls = await startTestMaster({ config: { http: { max_connections_per_peer: 5 } } });
    try {
      const url = tls.url.replace('https:', 'http:'); // raw TCP to the TLS port
      const flood = await Promise.all(Array.from({ length: 20 }, () => openRaw(url, '127.0.0.2')));
      await waitFor(() => flood.filter((c) => c.isClosed()).length >= 15, { what: 'the excess closed' });
      expect(flood.filter((c) => !c.isClosed()).length).toBe(5);
      const res = await tls.rest(tls.createToken('tess', ['submitter'])).get('/api/v1/status');
      expect(res.status).toBe(200);
      for (const c of flood) c.socket.destroy();
    } finally {
      await tls.close();
    }
  });
});
