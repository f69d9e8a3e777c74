import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import { silentLogger } from '../../../../src/platform/logger.js';
import { OutboxSender, type OutgoingBody } from '../../../../worker/link/outbox.js';
import { type LocalStore, openLocalStore } from '../../../../worker/store/local-store.js';

// The real store (in memory) behind the sender; the socket is a recording fake.

let store: LocalStore;
let sent: Array<{ type: string; seq: number; execution_id?: string }>;
let buffered: number;
let open: boolean;
let outbox: OutboxSender;

const transport = {
  send: (text: string) => {
    if (!open) return false;
    sent.push(JSON.parse(text));
    return true;
  },
  bufferedAmount: () => buffered,
};

const log = (n: number): OutgoingBody => ({
  type: 'log',
  execution_id: `e${n}`,
  stream: 'stdout',
  offset: 0,
  data: String(n),
});
const sample = (at: number): OutgoingBody => ({
  type: 'sample',
  sampled_at: at,
  cards: [],
  sampler_error: null,
  held_cards: [],
});
const flush = () => new Promise((r) => setImmediate(r));
const until = async (predicate: () => boolean) => {
  for (let i = 0; i < 200 && !predicate(); i++) await new Promise((r) => setTimeout(r, 5));
};

beforeEach(() => {
  store = openLocalStore(':memory:');
  sent = [];
  buffered = 0;
  open = true;
  outbox = new OutboxSender(store, 'boot-1', transport, silentLogger());
});
afterEach(() => store.close());

describe('OutboxSender', () => {
  it('holds messages until welcome and skips what the master already has', async () => {
    for (let i = 1; i <= 4; i++) outbox.enqueue(log(i));
    await flush();
    expect(sent).toEqual([]);
    outbox.startSession([{ boot_id: 'boot-1', seq: 2 }]);
    expect(sent.map((m) => m.seq)).toEqual([3, 4]);
    outbox.enqueue(log(5));
    await flush();
    expect(sent.map((m) => m.seq)).toEqual([3, 4, 5]);
    expect(sent[2]).toMatchObject({
      protocol_version: PROTOCOL_VERSION,
      boot_id: 'boot-1',
      execution_id: 'e5',
    });
  });

  it('resends everything unacknowledged in order after a new session', async () => {
    outbox.startSession([]);
    for (let i = 1; i <= 3; i++) outbox.enqueue(log(i));
    await flush();
    outbox.ack('boot-1', 2);
    outbox.endSession();
    outbox.enqueue(log(4));
    await flush();
    expect(sent.map((m) => m.seq)).toEqual([1, 2, 3]);
    sent = [];
    outbox.startSession([]);
    expect(sent.map((m) => m.seq)).toEqual([1, 3, 4]);
    expect(outbox.hasUnacked()).toBe(true);
  });

  it('keeps only the newest unacknowledged sample', async () => {
    outbox.enqueueLatest(sample(1));
    outbox.enqueue(log(1));
    outbox.enqueueLatest(sample(2));
    outbox.enqueueLatest(sample(3));
    outbox.startSession([]);
    expect(sent.map((m) => [m.type, m.seq])).toEqual([
      ['log', 2],
      ['sample', 4],
    ]);
  });

  it('pauses above the high-water mark and resumes in order, page after page', async () => {
    outbox.startSession([]);
    buffered = 64 * 1024 * 1024;
    for (let i = 1; i <= 150; i++) outbox.enqueue(log(i));
    await flush();
    expect(sent.length).toBeLessThanOrEqual(1);
    buffered = 0;
    await until(() => sent.length === 150);
    expect(sent.map((m) => m.seq)).toEqual(Array.from({ length: 150 }, (_, i) => i + 1));
  });

  it('never sends a message whose transaction rolled back', async () => {
    outbox.startSession([]);
    expect(() =>
      store.transaction(() => {
        outbox.enqueue(log(1));
        throw new Error('handler failed');
      }),
    ).toThrow('handler failed');
    await flush();
    expect(sent).toEqual([]);
    outbox.enqueue(log(2));
    await flush();
    // The rolled-back seq is handed out again, to the message that was really stored.
    expect(sent).toEqual([expect.objectContaining({ seq: 1, execution_id: 'e2' })]);
  });
});
