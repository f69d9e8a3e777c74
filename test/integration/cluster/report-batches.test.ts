import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { clusterConfig } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { waitFor } from '../../support/wait.js';

/**
 * The hub applies the messages that arrive together in one transaction, each in its own savepoint, and
 * acknowledges them only once that committed (docs/decisions/0034-report-batches.md).
 * A hand-driven worker sends its frames in one tick (the test shares the master's event loop, so they
 * all wait in the socket until the master reads them at once).
 */

let m: TestMaster;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
});

afterAll(async () => {
  await m?.close();
});

async function raw(workerId: string): Promise<RawWorker> {
  const token = m.createToken(`token-${workerId}`, ['worker'], workerId);
  const w = await connectRawWorker({ url: m.url, caPem: m.caPem, token, workerId });
  onTestFinished(() => w.close());
  await w.hello(2);
  return w;
}

/** Counts the store's outermost transactions while it is installed. */
function countTransactions(): { outermost: () => number } {
  const store = m.store;
  const original = store.transaction;
  let depth = 0;
  let outermost = 0;
  store.transaction = <T>(fn: () => T): T => {
    if (depth === 0) outermost++;
    depth++;
    try {
      return original.call(store, fn) as T;
    } finally {
      depth--;
    }
  };
  onTestFinished(() => {
    store.transaction = original;
  });
  return { outermost: () => outermost };
}

const acked = (w: RawWorker, from: number) =>
  w.received
    .slice(from)
    .filter((r) => r['type'] === 'ack')
    .map((r) => r['seq']);

describe('report batches on the master', () => {
  it('applies the messages of one read in one transaction and acknowledges each, in order', async () => {
    const w = await raw('batch-many');
    const from = w.received.length;
    const tx = countTransactions();
    for (let seq = 1; seq <= 20; seq++) w.sample(seq, 2);
    await waitFor(() => (acked(w, from).length === 20 ? true : null), { what: '20 acks' });
    expect(acked(w, from)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    // One transaction per message before; now a batch per read (a few reads at most on loopback).
    expect(tx.outermost()).toBeLessThan(10);
    expect(m.store.workers.mark('batch-many', w.bootId)).toBe(20);
  });

  it('a message that fails rolls back alone: those before it commit and are acknowledged, none after it', async () => {
    const w = await raw('batch-fail');
    const from = w.received.length;
    const workers = m.store.workers;
    const original = workers.raiseMark;
    workers.raiseMark = (...args: Parameters<typeof original>) => {
      if (args[2] === 3) throw new Error('injected failure at seq 3');
      return original.apply(workers, args);
    };
    onTestFinished(() => {
      workers.raiseMark = original;
    });
    for (let seq = 1; seq <= 5; seq++) w.sample(seq, 2);
    await waitFor(() => (w.isOpen() ? null : true), { what: 'the session dropped' });
    // (The INTERNAL error reply may be cut off by the terminated socket.)
    expect(acked(w, from)).toEqual([1, 2]);
    expect(m.store.workers.mark('batch-fail', w.bootId)).toBe(2);
  });
});
