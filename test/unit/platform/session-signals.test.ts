import { getEventListeners } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withSessionSignals } from '../../../src/platform/ca-fetch.js';

/**
 * The MCP SDK's client transport passes its session's one AbortSignal to every request; undici adds a
 * listener per request that only garbage collection removes, and warns at 1,500. A long-lived stdio
 * bridge (and the bench's clients) printed MaxListenersExceededWarning after ~1,500 tool calls.
 */
let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    // /slow: one piece now, the rest never (until the client goes away).
    if (req.url === '/slow') res.write('first piece');
    else res.end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('withSessionSignals', () => {
  it('no listener of a finished request stays on the shared signal (undici alone leaves one per request until GC)', async () => {
    const bare = new AbortController();
    await (await fetch(url, { signal: bare.signal })).text();
    expect(getEventListeners(bare.signal, 'abort').length).toBeGreaterThan(0);
    const shared = new AbortController();
    const f = withSessionSignals(fetch);
    await (await f(url, { signal: shared.signal })).text();
    const cancelled = await f(url, { signal: shared.signal });
    await cancelled.body?.cancel();
    expect(getEventListeners(shared.signal, 'abort')).toHaveLength(0);
  });

  it('aborting the shared signal still aborts a body being read', async () => {
    const shared = new AbortController();
    const res = await withSessionSignals(fetch)(`${url}slow`, { signal: shared.signal });
    const reader = res.body!.getReader();
    await reader.read();
    shared.abort();
    await expect(reader.read()).rejects.toThrow(/abort/i);
    expect(getEventListeners(shared.signal, 'abort')).toHaveLength(0);
  });

  it('1,600 requests on one signal: no MaxListenersExceededWarning, and the signal still aborts a request', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => {
      if (w.name === 'MaxListenersExceededWarning') warnings.push(w);
    };
    process.on('warning', onWarning);
    try {
      const shared = new AbortController();
      const f = withSessionSignals(fetch);
      for (let i = 0; i < 1600; i += 100)
        await Promise.all(
          Array.from({ length: 100 }, async () => (await f(url, { signal: shared.signal })).text()),
        );
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).toEqual([]);
      shared.abort();
      await expect(f(url, { signal: shared.signal })).rejects.toThrow(/abort/i);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
