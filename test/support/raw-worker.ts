import WebSocket from 'ws';
import type { CardSample } from '../../src/contracts/sample.js';
import { sequenced } from '../../src/contracts/sequencing.js';
import { PROTOCOL_VERSION } from '../../src/contracts/worker-protocol.js';
import { SimSampler } from '../../worker/samplers/sim-sampler.js';
import { waitFor } from './wait.js';

/**
 * A hand-driven worker for protocol tests: a plain `ws` client with a worker token that sends exactly
 * the JSON a test gives it (duplicates, replays, old sequence numbers) and records every reply. Its
 * sequenced messages are stamped by the same function as the real senders' (src/contracts/sequencing.ts).
 */
export interface RawWorker {
  readonly workerId: string;
  readonly bootId: string;
  /** The 8 simulated cards `hello` and `sample` draw from, to craft other card lists. */
  readonly simCards: readonly CardSample[];
  /** Every message received, parsed, in order. */
  readonly received: Array<Record<string, unknown>>;
  /** Sends one message as JSON. */
  send(message: Record<string, unknown>): void;
  /** Sends a text frame as is (for input JSON.stringify cannot even produce). */
  sendText(text: string): void;
  /** Sends a binary frame (not part of the protocol). */
  sendBinary(data: Buffer): void;
  /** Sends a sequenced message under this boot id with `seq` (protocol_version and boot_id added). */
  sendSeq(seq: number, message: Record<string, unknown>): void;
  /** Waits for a received message matching `match` (at or after index `from`); returns it. */
  next(
    match: (m: Record<string, unknown>) => boolean,
    opts?: { from?: number; what?: string },
  ): Promise<Record<string, unknown>>;
  /** Sends `hello` with `cards` simulated cards and waits for `welcome`. */
  hello(cards: number): Promise<Record<string, unknown>>;
  /** Sends a sample of `cards` idle simulated cards under `seq`. */
  sample(seq: number, cards: number): void;
  /** Whether the socket is still open (the master may close it). */
  isOpen(): boolean;
  /** The close code the master sent, once closed. */
  closeCode(): number | null;
  close(): Promise<void>;
}

/** Connects to `<url>/api/v1/workers/connect` with `token`; resolves once the socket is open. */
export async function connectRawWorker(opts: {
  url: string;
  caPem: string | null;
  token: string;
  workerId: string;
  bootId?: string;
}): Promise<RawWorker> {
  const wsUrl = `${opts.url.replace(/^http/, 'ws')}/api/v1/workers/connect`;
  const ws = new WebSocket(wsUrl, {
    headers: { Authorization: `Bearer ${opts.token}` },
    ...(opts.caPem === null ? {} : { ca: opts.caPem }),
  });
  const received: Array<Record<string, unknown>> = [];
  let closeCode: number | null = null;
  ws.on('close', (code) => {
    closeCode = code;
  });
  ws.on('message', (data) => received.push(JSON.parse(data.toString()) as Record<string, unknown>));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  const bootId = opts.bootId ?? `raw-boot-${Date.now()}`;
  const all = await new SimSampler({ count: 8, seed: opts.workerId }).sample();
  const cardsOf = (n: number) => all.slice(0, n);
  const raw: RawWorker = {
    workerId: opts.workerId,
    bootId,
    simCards: all,
    received,
    send: (message) => ws.send(JSON.stringify(message)),
    sendText: (text) => ws.send(text),
    sendBinary: (data) => ws.send(data, { binary: true }),
    sendSeq: (seq, message) => ws.send(JSON.stringify(sequenced(message as { type: string }, bootId, seq))),
    next: (match, o = {}) =>
      waitFor(() => received.slice(o.from ?? 0).find(match), { what: o.what ?? 'a message from the master' }),
    async hello(n) {
      const from = received.length;
      raw.send({
        type: 'hello',
        protocol_version: PROTOCOL_VERSION,
        worker_id: opts.workerId,
        boot_id: bootId,
        version: 'raw-test',
        hostname: 'raw-host',
        provider: 'sim',
        cards: cardsOf(n),
        executions: [],
        master_marks: [],
        // Claims a sandbox so that `policy.require_isolation` lets the master place tasks here.
        isolation: 'bwrap',
      });
      return raw.next((m) => m['type'] === 'welcome', { from, what: 'welcome' });
    },
    async sample(seq, n) {
      raw.sendSeq(seq, { type: 'sample', sampled_at: Date.now(), cards: cardsOf(n), sampler_error: null });
    },
    isOpen: () => ws.readyState === WebSocket.OPEN,
    closeCode: () => closeCode,
    close: () =>
      new Promise<void>((resolve) => {
        if (ws.readyState === WebSocket.CLOSED) return resolve();
        ws.once('close', () => resolve());
        ws.close();
      }),
  };
  return raw;
}
