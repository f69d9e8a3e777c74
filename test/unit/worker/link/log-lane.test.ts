import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_LOG_CHUNK_BYTES } from '../../../../src/contracts/worker-protocol.js';
import { silentLogger } from '../../../../src/platform/logger.js';
import { coalesceLogChunks, LogLane, TURN_BYTES } from '../../../../worker/link/log-lane.js';
import { OutboxSender } from '../../../../worker/link/outbox.js';
import { type LocalStore, openLocalStore } from '../../../../worker/store/local-store.js';

// The log lane (docs/performance.md "Noisy neighbours"): the pure merge of queued chunks, then fair turns and report priority over
// the real store (in memory) with a recording socket.

const chunk = (id: number, offset: number, data: string, stream: 'stdout' | 'stderr' = 'stdout') => ({
  id,
  stream,
  offset,
  data,
});

describe('coalesceLogChunks', () => {
  it('merges chunks that continue each other, per stream, in queue order', () => {
    const turn = coalesceLogChunks(
      [chunk(1, 0, 'ab'), chunk(2, 0, 'E', 'stderr'), chunk(3, 2, 'cd'), chunk(4, 1, 'F', 'stderr')],
      1000,
    );
    expect(turn).toEqual({
      pieces: [
        { stream: 'stdout', offset: 0, data: 'abcd' },
        { stream: 'stderr', offset: 0, data: 'EF' },
      ],
      lastId: 4,
    });
  });

  it('never merges across a gap or a lossy chunk (its text is longer than its bytes)', () => {
    const lossy = '\uFFFD'; // one raw byte, three bytes of text
    const turn = coalesceLogChunks([chunk(1, 0, lossy), chunk(2, 1, 'x'), chunk(3, 5, 'y')], 1000);
    expect(turn?.pieces.map((p) => [p.offset, p.data])).toEqual([
      [0, lossy],
      [1, 'x'],
      [5, 'y'],
    ]);
  });

  it('stops at the turn budget (taking at least one chunk) and keeps each message within a chunk', () => {
    const full = 'x'.repeat(MAX_LOG_CHUNK_BYTES);
    expect(coalesceLogChunks([chunk(1, 0, full), chunk(2, full.length, 'y')], TURN_BYTES)).toEqual({
      pieces: [{ stream: 'stdout', offset: 0, data: full }],
      lastId: 1,
    });
    const half = 'h'.repeat(MAX_LOG_CHUNK_BYTES / 2 + 1);
    const two = coalesceLogChunks([chunk(1, 0, half), chunk(2, half.length, half)], 10 * MAX_LOG_CHUNK_BYTES);
    expect(two?.pieces.length).toBe(2);
    expect(coalesceLogChunks([], TURN_BYTES)).toBeNull();
  });
});

let store: LocalStore;
beforeEach(() => {
  store = openLocalStore(':memory:');
});
afterEach(() => store.close());

const full = (n: number) => String(n % 10).repeat(MAX_LOG_CHUNK_BYTES);

describe('LogLane', () => {
  it('gives every execution with queued log a turn in id order, however deep one queue is', () => {
    const lane = new LogLane(store);
    for (let i = 0; i < 50; i++) lane.queue('exec-flood', 'stdout', i * MAX_LOG_CHUNK_BYTES, full(i));
    lane.queue('exec-b', 'stdout', 0, 'b1');
    lane.queue('exec-c', 'stderr', 0, 'c1');
    lane.queue('exec-c', 'stderr', 2, 'c2');
    const order: string[] = [];
    for (let i = 0; i < 6; i++)
      order.push(...lane.takeTurn().map((b) => (b.type === 'log' ? b.execution_id : '?')));
    expect(order).toEqual(['exec-b', 'exec-c', 'exec-flood', 'exec-flood', 'exec-flood', 'exec-flood']);
    // exec-c's two chunks went as one message; the flood went one full chunk per turn.
    expect(store.queuedLogBytes('exec-c')).toBe(0);
    expect(store.queuedLogBytes('exec-flood')).toBe(46 * MAX_LOG_CHUNK_BYTES);
  });

  it('hands over a small log whole at exit, and leaves a flood to its turns', () => {
    const lane = new LogLane(store);
    lane.queue('quiet', 'stdout', 0, 'done\n');
    for (let i = 0; i < 20; i++) lane.queue('loud', 'stdout', i * MAX_LOG_CHUNK_BYTES, full(i));
    expect(lane.takeAllOf('quiet')).toEqual([
      { type: 'log', execution_id: 'quiet', stream: 'stdout', offset: 0, data: 'done\n' },
    ]);
    expect(lane.takeAllOf('loud', 1024 * 1024)).toEqual([]);
    expect(store.queuedLogBytes('loud')).toBe(20 * MAX_LOG_CHUNK_BYTES);
  });
});

describe('LogLane: knowing the queue is empty', () => {
  it('says there may be a turn at first (chunks left by a previous process) and after each queued chunk', () => {
    store.queueLogChunk('left-over', 'stdout', 0, 'from before the restart');
    const lane = new LogLane(store);
    expect(lane.mayHaveTurn()).toBe(true);
    expect(lane.takeTurn()).toHaveLength(1);
    expect(lane.mayHaveTurn()).toBe(true); // not known empty until a turn finds nothing
    expect(lane.takeTurn()).toEqual([]);
    expect(lane.mayHaveTurn()).toBe(false);
    lane.queue('e1', 'stdout', 0, 'x');
    expect(lane.mayHaveTurn()).toBe(true);
    expect(lane.takeTurn()).toEqual([
      { type: 'log', execution_id: 'e1', stream: 'stdout', offset: 0, data: 'x' },
    ]);
  });

  it('the sender still moves a chunk queued after the lane was found empty', async () => {
    const sent: Array<{ type: string }> = [];
    const outbox = new OutboxSender(
      store,
      'boot-1',
      { send: (t) => sent.push(JSON.parse(t)) > 0, bufferedAmount: () => 0 },
      silentLogger(),
    );
    outbox.startSession([]); // finds the lane empty
    outbox.enqueueLog('e1', 'stdout', 0, 'late');
    await new Promise((r) => setImmediate(r));
    expect(sent).toMatchObject([{ type: 'log', execution_id: 'e1', data: 'late', seq: 1 }]);
  });
});

describe('OutboxSender with the log lane', () => {
  let sent: Array<{ type: string; seq: number; execution_id?: string; data?: string }>;
  let outbox: OutboxSender;
  beforeEach(() => {
    sent = [];
    outbox = new OutboxSender(
      store,
      'boot-1',
      {
        send: (text) => {
          sent.push(JSON.parse(text));
          return true;
        },
        bufferedAmount: () => 0,
      },
      silentLogger(),
    );
  });
  const flush = () => new Promise((r) => setImmediate(r));

  it('sends a report enqueued during a flood behind at most the in-flight window, then paces on acks', async () => {
    outbox.startSession([]);
    for (let i = 0; i < 100; i++) outbox.enqueueLog('exec-flood', 'stdout', i * MAX_LOG_CHUNK_BYTES, full(i));
    await flush();
    const before = sent.length;
    // The master acknowledges nothing: the window (1 MiB) stops the flood far short of its 6.25 MiB.
    expect(before).toBeGreaterThan(0);
    expect(before * MAX_LOG_CHUNK_BYTES).toBeLessThanOrEqual(1024 * 1024 + MAX_LOG_CHUNK_BYTES);
    outbox.enqueue({
      type: 'execution',
      execution_id: 'exec-quiet',
      task_id: 'task-quiet',
      lease_epoch: 1,
      phase: 'started',
    });
    await flush();
    expect(sent.length).toBe(before + 1);
    expect(sent.at(-1)).toMatchObject({ type: 'execution', execution_id: 'exec-quiet', seq: before + 1 });
    // Acks open the window again; an acknowledged log chunk leaves the disk at once.
    for (const m of sent.slice(0, 4)) outbox.ack('boot-1', m.seq);
    await flush();
    expect(sent.length).toBeGreaterThan(before + 1);
    expect(sent.slice(before + 1).every((m) => m.type === 'log')).toBe(true);
    expect(store.listUnackedOutbox().length).toBe(sent.length - 4);
    const kept = store.listUnackedOutbox(10_000).map((e) => e.seq);
    for (const m of sent.slice(0, 4)) expect(kept).not.toContain(m.seq);
  });

  it('sends a task’s small log before its exit report, seq first', async () => {
    outbox.startSession([]);
    store.transaction(() => {
      outbox.enqueueLog('exec-q', 'stdout', 0, 'hello\n');
      outbox.enqueueLogsBeforeExit('exec-q');
      outbox.enqueue({
        type: 'execution',
        execution_id: 'exec-q',
        task_id: 'task-q',
        lease_epoch: 1,
        phase: 'exited',
        exit_code: 0,
        signal: null,
        failure_reason: null,
        outputs: [],
      });
    });
    await flush();
    expect(sent.map((m) => [m.type, m.seq])).toEqual([
      ['log', 1],
      ['execution', 2],
    ]);
  });
});
