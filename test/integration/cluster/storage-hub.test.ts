import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { clusterConfig } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { waitFor } from '../../support/wait.js';

/**
 * The worker hub when the store cannot write (ADR 0016), with a hand-driven worker. A store
 * write fails as better-sqlite3 reports a full disk (an error with code SQLITE_FULL, injected into one
 * repository method: filling a real disk at exactly the hello is not deterministic; disk-full.test.ts
 * fills real ones). The hello is welcomed anyway and stored once the store recovers; a sequenced message
 * is answered UNAVAILABLE, not acknowledged, and the session closed with 4003; a worker sending an
 * unparsable sequenced message meanwhile does not crash the master.
 */

let m: TestMaster;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig({ storage: { check_interval_ms: 3_600_000 } }) });
});

afterAll(async () => {
  await m?.close();
});

function diskFull(): Error {
  return Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
}

/** Makes `method` of `target` throw SQLITE_FULL until the returned function is called. */
function failing<T extends object>(target: T, method: keyof T & string): () => void {
  const original = target[method];
  (target as Record<string, unknown>)[method] = () => {
    throw diskFull();
  };
  return () => {
    (target as Record<string, unknown>)[method] = original;
  };
}

const tokens = new Map<string, string>();

async function raw(workerId: string): Promise<RawWorker> {
  let token = tokens.get(workerId);
  if (token === undefined) {
    token = m.createToken(`token-${workerId}`, ['worker'], workerId);
    tokens.set(workerId, token);
  }
  const w = await connectRawWorker({ url: m.url, caPem: m.caPem, token, workerId });
  onTestFinished(() => w.close());
  return w;
}

const health = async () => m.rest(null).get<{ storage: { state: string; detail?: string } }>('/healthz');

describe('the hub while the store cannot write', () => {
  it('welcomes a hello it cannot store, refuses the next message unacknowledged with 4003, stores the hello on recovery', async () => {
    const w = await raw('raw-full');
    const restore = failing(m.store.workers, 'upsertOnHello');
    let restored = false;
    onTestFinished(() => {
      if (!restored) restore();
    });
    await w.hello(2);
    expect(m.store.workers.get('raw-full')).toBeUndefined();
    expect(m.deps.cluster.fleet.isOnline('raw-full', Date.now())).toBe(true);
    const res = await health();
    expect(res.status).toBe(503);
    expect(res.body.storage).toMatchObject({ state: 'unwritable' });
    expect(res.body.storage.detail).toMatch(/SQLITE_FULL/);

    // The next sequenced message: the hello is retried first, fails, and the message is refused.
    const from = w.received.length;
    w.sample(1, 2);
    const refused = await w.next((r) => r['type'] === 'error', { from, what: 'an error reply' });
    expect(refused).toMatchObject({ code: 'UNAVAILABLE', ref_seq: 1 });
    expect(await waitFor(() => w.closeCode(), { what: 'the session closed' })).toBe(4003);
    expect(w.received.slice(from).some((r) => r['type'] === 'ack')).toBe(false);
    expect(m.store.workers.marks('raw-full')).toEqual([]);

    // A new session, the store recovers: the pending hello is stored without a new hello.
    const again = await raw('raw-full');
    await again.hello(2);
    expect(m.store.workers.get('raw-full')).toBeUndefined();
    restore();
    restored = true;
    await m.master.storage.check();
    expect((await health()).status).toBe(200);
    expect(m.store.workers.get('raw-full')).toMatchObject({ id: 'raw-full', boot_id: again.bootId });
    const acked = again.received.length;
    again.sample(1, 2);
    await again.next((r) => r['type'] === 'ack' && r['seq'] === 1, { from: acked, what: 'ack of seq 1' });
  });

  it('answers an unparsable sequenced message it cannot mark with UNAVAILABLE, and lives on', async () => {
    const w = await raw('raw-poison');
    await w.hello(1);
    const restore = failing(m.store.workers, 'raiseMark');
    onTestFinished(restore);
    const from = w.received.length;
    w.send({ type: 'log', boot_id: w.bootId, seq: 7, protocol_version: 1, garbage: true });
    const replies = await waitFor(() => {
      const got = w.received.slice(from);
      return got.some((r) => r['code'] === 'UNAVAILABLE') ? got : null;
    });
    expect(replies.some((r) => r['type'] === 'ack')).toBe(false);
    expect(await waitFor(() => w.closeCode(), { what: 'the session closed' })).toBe(4003);
    // The raw failure (outside a transaction) flipped the store to unwritable, until a probe write works.
    expect((await health()).body.storage).toMatchObject({ state: 'unwritable' });
    restore();
    await m.master.storage.check();
    expect((await health()).status).toBe(200);
  });
});
