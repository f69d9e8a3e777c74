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
