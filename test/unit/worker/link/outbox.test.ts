import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

  it('writes the acks of one tick in one call; acks of unknown or unsent messages change nothing', async () => {
    outbox.startSession([]);
    for (let i = 1; i <= 5; i++) outbox.enqueue(log(i));
    outbox.enqueue({ type: 'execution', execution_id: 'x', task_id: 't', lease_epoch: 1, phase: 'started' });
    await flush();
    expect(sent).toHaveLength(6);
    const batches: number[] = [];
    const ackMany = store.ackOutboxMany.bind(store);
    store.ackOutboxMany = (acks) => {
      batches.push(acks.length);
      return ackMany(acks);
    };
    for (let seq = 1; seq <= 6; seq++) outbox.ack('boot-1', seq);
    outbox.ack('boot-1', 6); // repeated
    outbox.ack('boot-1', 999); // never sent
    outbox.ack('boot-other', 1); // unknown boot
    await flush();
    expect(batches).toEqual([9]);
    expect(outbox.hasUnacked()).toBe(false);
    expect(store.listUnackedOutbox()).toEqual([]);
  });

  it('writes waiting acks in the transaction of the next report; a rollback only makes them resent', async () => {
    outbox.startSession([]);
    for (let i = 1; i <= 3; i++) outbox.enqueue(log(i));
    await flush();
    outbox.ack('boot-1', 1);
    store.transaction(() => {
      outbox.enqueue(log(4));
      expect(store.listUnackedOutbox().map((e) => e.seq)).toEqual([2, 3, 4]); // before any tick
    });
    outbox.ack('boot-1', 2);
    expect(() =>
      store.transaction(() => {
        outbox.enqueue(log(5));
        throw new Error('report failed');
      }),
    ).toThrow('report failed');
    await flush();
    // The ack of seq 2 was lost with the rollback: seq 2 is resent next session (a duplicate there).
    sent = [];
    outbox.endSession();
    outbox.startSession([]);
    expect(sent.map((m) => m.seq)).toEqual([2, 3, 4]);
  });

  it('a worker that dies before writing its acks resends those messages, and nothing else', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-outbox-'));
    try {
      const file = join(dir, 'worker.sqlite');
      let disk = openLocalStore(file);
      let sender = new OutboxSender(disk, 'boot-1', transport, silentLogger());
      sender.startSession([]);
      for (let i = 1; i <= 3; i++) sender.enqueue(log(i));
      await flush();
      sender.ack('boot-1', 1);
      sender.flushAcks();
      sender.ack('boot-1', 2); // received, not yet written: the process dies here
      disk.close();
      // A crash between a commit and its send: appended, never sent.
      disk = openLocalStore(file);
      disk.appendOutbox('boot-1', (seq) => ({
        ...log(4),
        protocol_version: PROTOCOL_VERSION,
        boot_id: 'boot-1',
        seq,
      }));
      disk.close();

      disk = openLocalStore(file);
      sent = [];
      sender = new OutboxSender(disk, 'boot-2', transport, silentLogger());
      sender.startSession([]);
      // seq 2 again (the master drops it as a duplicate and acks it), 3, and the never-sent 4.
      expect(sent.map((m) => m.seq)).toEqual([2, 3, 4]);
      disk.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sends each message exactly as it was stored', async () => {
    const texts: string[] = [];
    const raw = new OutboxSender(
      store,
      'boot-1',
      { send: (t) => texts.push(t) > 0, bufferedAmount: () => 0 },
      silentLogger(),
    );
    raw.startSession([]);
    raw.enqueue({
      type: 'log',
      execution_id: 'e1',
      stream: 'stdout',
      offset: 0,
      data: 'tab\t"quote" é \u2028 end',
    });
    await flush();
    expect(texts).toEqual(store.listUnackedOutboxAfter(0, 10).map((e) => e.text));
    expect(JSON.parse(texts[0]!)).toMatchObject({ data: 'tab\t"quote" é \u2028 end', seq: 1 });
  });
});
