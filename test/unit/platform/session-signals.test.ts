import { getMaxListeners } from 'node:events';
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
  server = createServer((_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('withSessionSignals', () => {
  it('lifts the listener limit of a signal shared by requests (undici alone sets 1,500)', async () => {
    const bare = new AbortController();
    await (await fetch(url, { signal: bare.signal })).text();
    expect(getMaxListeners(bare.signal)).toBe(1500);
    const shared = new AbortController();
    await (await withSessionSignals(fetch)(url, { signal: shared.signal })).text();
    expect(getMaxListeners(shared.signal)).toBe(0);
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
