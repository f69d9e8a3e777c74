import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { WorkerConnection } from '../../../../worker/link/connection.js';
import { connectForever, workerConnectUrl } from '../../../../worker/link/connection.js';
import { FakeMaster } from '../../../support/fake-master.js';
import { waitFor } from '../../../support/wait.js';

describe('workerConnectUrl', () => {
  it('derives the WSS endpoint from the master URL', () => {
    expect(workerConnectUrl('https://gpu.example:8443')).toBe(
      'wss://gpu.example:8443/api/v1/workers/connect',
    );
    expect(workerConnectUrl('https://gpu.example/broker/')).toBe(
      'wss://gpu.example/broker/api/v1/workers/connect',
    );
    expect(workerConnectUrl('http://127.0.0.1:8080')).toBe('ws://127.0.0.1:8080/api/v1/workers/connect');
    expect(workerConnectUrl('http://[::1]:8080')).toBe('ws://[::1]:8080/api/v1/workers/connect');
    expect(workerConnectUrl('wss://h:1/api/v1/workers/connect')).toBe('wss://h:1/api/v1/workers/connect');
  });

  it('refuses plain http off loopback and other schemes', () => {
    expect(() => workerConnectUrl('http://gpu.example:8080')).toThrow(/token is not sent in clear/);
    expect(() => workerConnectUrl('ftp://h')).toThrow(RangeError);
    expect(() => workerConnectUrl('not a url')).toThrow(RangeError);
  });
});

describe('connectForever', () => {
  let master: FakeMaster;
  let conn: WorkerConnection | undefined;
  const lines: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void lines.push(s) });
  beforeEach(async () => {
    master = await FakeMaster.start();
    lines.length = 0;
  });
  afterEach(async () => {
    await conn?.close();
    await master.close();
  });

  it('sends the bearer token and redials after the socket is cut', { timeout: 3000 }, async () => {
    let opens = 0;
    let closes = 0;
    conn = connectForever({
      url: workerConnectUrl(master.url),
      token: master.token,
      logger,
      backoff: { initialMs: 10, maxMs: 50 },
      onOpen: () => {
        opens += 1;
      },
      onMessage: () => undefined,
      onClose: () => {
        closes += 1;
      },
    });
    await waitFor(() => opens === 1 && master.connected());
    expect(master.attempts).toEqual([master.token]);
    master.dropSocket();
    await waitFor(() => opens === 2 && master.connected(), { timeoutMs: 2500, what: 'a second socket' });
    expect(closes).toBe(1);
    expect(conn.send('{"type":"ack","boot_id":"b","seq":1}')).toBe(true);
  });

  it('after a close with 4003 (master store full) waits unavailableMs, not its short backoff', {
    timeout: 3000,
  }, async () => {
    let opens = 0;
    conn = connectForever({
      url: workerConnectUrl(master.url),
      token: master.token,
      logger,
      random: () => 0.5, // no jitter: the logged delay is the configured one
      backoff: { initialMs: 10, maxMs: 50, unavailableMs: 300 },
      onOpen: () => {
        opens += 1;
      },
      onMessage: () => undefined,
      onClose: () => undefined,
    });
    await waitFor(() => opens === 1 && master.connected());
    const delays = () =>
      lines
        .map((l) => JSON.parse(l) as { msg: string; delay_ms?: number })
        .filter((l) => l.msg === 'worker: reconnecting after a delay')
        .map((l) => l.delay_ms);
    master.closeSocket(4003, 'master storage unavailable');
    await waitFor(() => opens === 2 && master.connected(), { timeoutMs: 2500, what: 'a second socket' });
    expect(delays()).toEqual([300]);
    expect(lines.some((l) => l.includes('out of disk space'))).toBe(true);
    master.closeSocket(1000, 'bye');
    await waitFor(() => opens === 3 && master.connected(), { timeoutMs: 2500, what: 'a third socket' });
    expect(delays()).toEqual([300, 10]); // an ordinary close: the short backoff again
  });

  it('logs a refused token clearly and retries slowly', { timeout: 3000 }, async () => {
    conn = connectForever({
      url: workerConnectUrl(master.url),
      token: 'wrong',
      logger,
      backoff: { initialMs: 10, maxMs: 50, refusedMs: 60_000 },
      onOpen: () => undefined,
      onMessage: () => undefined,
      onClose: () => undefined,
    });
    await waitFor(() => lines.some((l) => l.includes('HTTP 401')), {
      timeoutMs: 2500,
      what: 'the refusal to be logged',
    });
    // Room for several fast retries: none may happen while the slow delay runs.
    await new Promise((r) => setTimeout(r, 200));
    expect(master.attempts).toEqual(['wrong']);
    expect(conn.isOpen()).toBe(false);
    expect(conn.send('x')).toBe(false);
  });
});

describe('connectForever after a partition (docs/operations.md "Partitions")', () => {
  let conn: WorkerConnection | undefined;
  let server: Server | undefined;
  const held: Socket[] = [];
  const lines: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void lines.push(s) });
  afterEach(async () => {
    await conn?.close();
    for (const s of held.splice(0)) s.destroy();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    server = undefined;
    lines.length = 0;
  });

  /** A TCP server that accepts and never answers: a dial into a silent path. Returns its port. */
  async function silentServer(onConnection: () => void): Promise<number> {
    const s = createServer((socket) => {
      held.push(socket);
      onConnection();
    });
    server = s;
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
    return (s.address() as AddressInfo).port;
  }

  it.each(['ws', 'wss'])(
    'gives up a %s handshake into a silent path after handshakeTimeoutMs, then redials',
    {
      timeout: 5000,
    },
    async (scheme) => {
      const dials: number[] = [];
      const port = await silentServer(() => dials.push(Date.now()));
      conn = connectForever({
        url: `${scheme}://127.0.0.1:${port}/api/v1/workers/connect`,
        token: 't',
        logger,
        handshakeTimeoutMs: 300,
        backoff: { initialMs: 10, maxMs: 20 },
        onOpen: () => undefined,
        onMessage: () => undefined,
        onClose: () => undefined,
      });
      await waitFor(() => dials.length >= 3, { timeoutMs: 4000, what: 'three dials' });
      // Each dial waited its 300 ms, never twice that (ws's own timer did over TLS), plus at most 20 ms.
      for (let i = 1; i < dials.length; i++) expect(dials[i]! - dials[i - 1]!).toBeLessThan(300 + 20 + 150);
      expect(lines.some((l) => l.includes('handshake timed out'))).toBe(true);
    },
  );

  it('never waits longer than maxMs to redial, jitter included', { timeout: 5000 }, async () => {
    // Nothing listens there: every dial fails at once and the delay doubles to its ceiling.
    const port = await silentServer(() => undefined);
    await new Promise<void>((resolve) => server!.close(() => resolve()));
    server = undefined;
    conn = connectForever({
      url: `ws://127.0.0.1:${port}/api/v1/workers/connect`,
      token: 't',
      logger,
      random: () => 0.999, // the most jitter there is: +50 %
      backoff: { initialMs: 10, maxMs: 50 },
      onOpen: () => undefined,
      onMessage: () => undefined,
      onClose: () => undefined,
    });
    const delays = () =>
      lines.flatMap((l) => {
        const m = /"delay_ms":(\d+)/.exec(l);
        return m ? [Number(m[1])] : [];
      });
    await waitFor(() => delays().length >= 8, { timeoutMs: 4000, what: 'eight redials' });
    expect(Math.max(...delays())).toBe(50);
  });
});
