import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { textClassifier } from '../../../src/broker/tools/inputs.js';
import {
  setVerifiedContentCacheBytes,
  verifiedContentHeldBytes,
  verifiedPages,
} from '../../../src/broker/verified-blob.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * The master keeps verified input bytes in memory for paging up to a budget (128 MiB by default). Found by
 * review: first reads of *different* blobs at once each kept their whole blob while hashing it, so one
 * submitter calling get_input in parallel on a few large inputs held several times the budget. Now a first
 * read counts against the budget from its start; past it, it hashes without keeping.
 */
const MIB = 1024 * 1024;
let f: BrokerFixture;
let owner: string;
const blobs: Array<{ sha256: string; bytes: Buffer }> = [];

beforeAll(() => {
  f = makeBrokerDeps({ dbPath: join(makeTempDir('content-budget'), 'master.sqlite') });
  owner = f.principal('alice', ['submitter']).id;
  for (let i = 0; i < 9; i++) {
    const bytes = randomBytes(2 * MIB);
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    const pieces = [bytes.subarray(0, MIB), bytes.subarray(MIB)];
    f.deps.store.transaction(() => {
      f.deps.store.blobs.putChunks(sha256, bytes.length, pieces, f.clock.now());
      f.deps.store.blobs.recordUpload(owner, sha256, f.clock.now());
    });
    blobs.push({ sha256, bytes });
  }
});
afterEach(() => setVerifiedContentCacheBytes(f.deps, 128 * MIB));
afterAll(() => {
  f?.close();
  removeTempDirs();
});

describe('the verified-content budget', () => {
  it('holds while six first reads of different 2 MiB blobs run at once (budget 5 MiB), and every page is right', async () => {
    setVerifiedContentCacheBytes(f.deps, 0); // empty the cache of earlier reads
    setVerifiedContentCacheBytes(f.deps, 5 * MIB);
    let peak = 0;
    let sampling = true;
    const sample = () => {
      peak = Math.max(peak, verifiedContentHeldBytes(f.deps));
      if (sampling) setImmediate(sample);
    };
    sample();
    const pages = await Promise.all(
      blobs.slice(0, 6).map((b) => verifiedPages(f.deps, owner, b.sha256, textClassifier)),
    );
    sampling = false;
    expect(peak).toBeLessThanOrEqual(5 * MIB);
    expect(peak).toBeGreaterThan(0); // some were kept
    expect(verifiedContentHeldBytes(f.deps)).toBeLessThanOrEqual(5 * MIB);
    for (const [i, p] of pages.entries()) {
      expect(p.size).toBe(2 * MIB);
      expect(p.read(MIB - 10, MIB + 10)).toEqual(blobs[i]!.bytes.subarray(MIB - 10, MIB + 10));
    }
  });

  it('a newer blob takes the place of older cached content (least recently read first)', async () => {
    setVerifiedContentCacheBytes(f.deps, 0);
    setVerifiedContentCacheBytes(f.deps, 4 * MIB);
    // Blobs not read before: each first read keeps its bytes, letting the oldest go when they do not fit.
    const fresh = blobs.slice(6);
    for (const b of fresh) await verifiedPages(f.deps, owner, b.sha256, textClassifier);
    expect(verifiedContentHeldBytes(f.deps)).toBe(4 * MIB);
    const again = await verifiedPages(f.deps, owner, fresh[0]!.sha256, textClassifier);
    expect(again.read(0, 16)).toEqual(fresh[0]!.bytes.subarray(0, 16));
  });

  it('a blob collected while its first read is under way is NOT_FOUND, not reported as tampered', async () => {
    const bytes = randomBytes(6 * MIB); // six chunks: the read is still fetching them when it is gone
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    const errors: unknown[] = [];
    const logger = f.deps.logger;
    const spy = vi.spyOn(logger, 'error').mockImplementation((...args: unknown[]) => {
      errors.push(args);
    });
    try {
      f.deps.store.transaction(() => {
        f.deps.store.blobs.putChunks(sha256, bytes.length, [bytes], f.clock.now());
        f.deps.store.blobs.recordUpload(owner, sha256, f.clock.now());
      });
      const reading = verifiedPages(f.deps, owner, sha256, textClassifier);
      // The read yields after its first chunk; the collector removes the blob meanwhile.
      await new Promise((r) => setImmediate(r));
      f.deps.store.db.prepare('DELETE FROM blob_uploads WHERE sha256 = ?').run(sha256);
      f.deps.store.db.prepare('DELETE FROM blob_chunks WHERE sha256 = ?').run(sha256);
      f.deps.store.db.prepare('DELETE FROM blobs WHERE sha256 = ?').run(sha256);
      await expect(reading).rejects.toMatchObject({ code: 'NOT_FOUND' });
      expect(errors).toEqual([]);
    } finally {
      spy.mockRestore();
    }
  });
});
