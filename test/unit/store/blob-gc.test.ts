import { createHash } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { collectBlobGarbageInBatches } from '../../../src/broker/loops/blob-gc.js';
import { blobGcUnderWay, newSweepMarks, tick } from '../../../src/broker/loops/sweep.js';
import type { ManualClock } from '../../../src/platform/clock.js';
import { EXPIRE_UPLOADS_SQL } from '../../../src/store/blobs-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';
import { validSpec } from '../../support/spec.js';

// docs/performance.md "Noisy neighbours": the sweep collects blobs batch by batch (src/broker/loops/blob-gc.ts), one transaction per
// batch and the event loop free in between; the rules are BlobsRepo.collectGarbage's. Real SQLite.
// The longest event-loop block is measured in the bench (bench/store-upkeep.ts), not here.

const sha = (b: string) => createHash('sha256').update(b).digest('hex');
let f: BrokerFixture;
afterEach(() => f?.close());

/** `n` blobs uploaded by `owner` at the clock's now, straight into the store (fast). */
function seedBlobs(owner: string, n: number, prefix: string): string[] {
  const now = f.clock.now();
  const shas: string[] = [];
  f.deps.store.transaction(() => {
    for (let i = 0; i < n; i++) {
      const content = Buffer.from(`${prefix}-${i}\n`);
      const digest = sha(content.toString());
      f.deps.store.blobs.put(digest, content, now);
      f.deps.store.blobs.recordUpload(owner, digest, now);
      shas.push(digest);
    }
  });
  return shas;
}

const count = () => (f.deps.store.db.prepare('SELECT count(*) AS n FROM blobs').get() as { n: number }).n;

describe('blob garbage collection in batches', () => {
  it('collects 20,000 unreferenced blobs while other work runs between the batches', async () => {
    f = makeBrokerDeps();
    const alice = f.principal('alice', ['submitter']);
    seedBlobs(alice.id, 20_000, 'orphan');
    (f.clock as ManualClock).advance(25 * 3600_000);
    // Other calls stand in for requests: each runs only when the event loop is free.
    let served = 0;
    let stop = false;
    const other = (async () => {
      while (!stop) {
        await new Promise((r) => setImmediate(r));
        served++;
      }
    })();
    const result = await collectBlobGarbageInBatches(f.deps, undefined, { rows: 500, bytes: 1024 * 1024 });
    stop = true;
    await other;
    expect(result.blobs).toBe(20_000);
    expect(count()).toBe(0);
    // 40 batches of upload rows and 40 of blobs: the other work ran between them.
    expect(result.batches).toBeGreaterThanOrEqual(80);
    expect(served).toBeGreaterThanOrEqual(result.batches - 1);
  });

  it('keeps what a live proposal names and collects exactly what the one-shot collection would', async () => {
    f = makeBrokerDeps();
    const clock = f.clock as ManualClock;
    const alice = f.principal('alice', ['submitter']);
    const [keptSha] = seedBlobs(alice.id, 1, 'kept');
    seedBlobs(alice.id, 1_234, 'orphan');
    const kept = { path: 'kept.txt', sha256: keptSha!, size: Buffer.byteLength('kept-0\n') };
    await f.invoke(alice, 'create_proposal', { spec: validSpec({ inputs: [kept] }), idempotency_key: 'p1' });
    clock.advance(25 * 3600_000);
    const result = await collectBlobGarbageInBatches(f.deps, undefined, { rows: 100, bytes: 1024 });
    expect(result.blobs).toBe(1_234);
    expect(f.deps.store.blobs.meta(keptSha!)).toBeDefined();
    expect(count()).toBe(1);
  });

  it('a batch never deletes a blob re-uploaded after the batch before (the row is re-checked)', async () => {
    f = makeBrokerDeps();
    const clock = f.clock as ManualClock;
    const alice = f.principal('alice', ['submitter']);
    const shas = seedBlobs(alice.id, 300, 'x');
    clock.advance(25 * 3600_000);
    // Upload rows all expire in the first step; one blob is uploaded again before the blobs go.
    expect(f.deps.store.blobs.expireUploads(clock.now() - 24 * 3600_000, clock.now(), 1_000)).toBe(300);
    f.deps.store.blobs.recordUpload(alice.id, shas[0]!, clock.now());
    const r = f.deps.store.blobs.deleteUnheld(clock.now() - 24 * 3600_000, 1_000, 1024 * 1024);
    expect(r.blobs).toBe(299);
    expect(f.deps.store.blobs.meta(shas[0]!)).toBeDefined();
  });

  it('the sweep starts one collection at a time and the tick returns at once', async () => {
    f = makeBrokerDeps();
    const alice = f.principal('alice', ['submitter']);
    seedBlobs(alice.id, 2_000, 'orphan');
    (f.clock as ManualClock).advance(25 * 3600_000);
    const marks = newSweepMarks();
    const deps = { broker: f.deps, revalidateSessions: () => undefined, marks };
    tick(deps, f.clock.now());
    const running = blobGcUnderWay(f.deps);
    expect(running).toBeInstanceOf(Promise);
    expect(count()).toBeGreaterThan(0); // not done inside the tick
    marks.lastRetention = 0;
    tick(deps, f.clock.now() + 1);
    expect(blobGcUnderWay(f.deps)).toBe(running); // no second collection alongside the first
    await running;
    expect(count()).toBe(0);
    expect(blobGcUnderWay(f.deps)).toBeNull();
  });
});

describe('the in-use check of a blob-GC batch', () => {
  it('reads unfinished and recently finished tasks through their indexes, never the whole history', () => {
    f = makeBrokerDeps();
    // docs/performance.md "Noisy neighbours": each batch re-derived the in-use set by scanning every task (96 ms per batch with
    // 50,000 finished tasks); migration 014's tasks_unfinished and tasks_finished_at answer it instead.
    const plan = f.deps.store.db
      .prepare(`EXPLAIN QUERY PLAN ${EXPIRE_UPLOADS_SQL}`)
      .all({ createdBefore: 0, finishedAfter: 0, limit: 1 }) as Array<{ detail: string }>;
    const details = plan.map((r) => r.detail);
    expect(details).toContain('SEARCH t USING INDEX tasks_unfinished (finished_at=?)');
    expect(details).toContain('SEARCH t USING INDEX tasks_finished_at (finished_at>?)');
    expect(details.filter((d) => /^SCAN t\b/.test(d))).toEqual([]);
  });
});
