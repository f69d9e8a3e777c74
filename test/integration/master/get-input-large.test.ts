import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pageBounds, textClassifier } from '../../../src/broker/tools/inputs.js';
import { verifiedPages } from '../../../src/broker/verified-blob.js';
import { VERIFIED_CONTENT_CACHE_BYTES } from '../../../src/broker/verified-cache.js';
import { MAX_GET_INPUT_BYTES } from '../../../src/contracts/tools-inputs.js';
import { BLOB_CHUNK_BYTES } from '../../../src/store/blobs-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * docs/performance.md "Noisy neighbours": a blob larger than the 128 MiB cache of verified bytes was paged by SQLite substr(), which
 * loads the whole value per page (a 1 GiB input: a 1 GiB read per 256 KiB page; and one SQLite value
 * cannot even hold 1 GiB). Blobs over BLOB_CHUNK_BYTES are stored in chunks (migration 014-blob-chunks): the
 * first page streams them through the hash, each later page reads the chunks it overlaps. On a real
 * SQLite file: a generated blob twice the cache (256 MiB: mostly zeros, a distinct header per MiB) paged
 * through whole, the pages hash to the blob's digest, and the process never holds the blob (RSS grows by
 * less than half of it; a generous bound, not a timing). Twice the cache, not 1 GiB as before: the paths
 * are the same past the cache (stored in chunks over 1 MiB, never kept whole over the cache's budget), and
 * a quarter of the bytes cut its CPU time (vitest included) from 26.5 s to 7.2 s (docs/performance.md, "The
 * suite on its own clock").
 */
const SIZE = 2 * VERIFIED_CONTENT_CACHE_BYTES;
const MIB = 1024 * 1024;

/** The blob, a MiB at a time: zeros with the MiB's index written at its start (cheap, all distinct). */
function* pieces(): Generator<Buffer> {
  for (let i = 0; i < SIZE / MIB; i++) {
    const b = Buffer.alloc(MIB);
    b.write(`MiB ${i} of the large input\n`);
    yield b;
  }
}

let f: BrokerFixture;
let owner: string;
let sha256: string;

beforeAll(() => {
  f = makeBrokerDeps({ dbPath: join(makeTempDir('large-blob'), 'master.sqlite') });
  owner = f.principal('alice', ['submitter']).id;
  const h = createHash('sha256');
  for (const p of pieces()) h.update(p);
  sha256 = h.digest('hex');
  f.deps.store.transaction(() => {
    f.deps.store.blobs.putChunks(sha256, SIZE, pieces(), f.clock.now());
    f.deps.store.blobs.recordUpload(owner, sha256, f.clock.now());
  });
}, 120_000);
afterAll(() => {
  f?.close();
  removeTempDirs();
});

const count = (table: string) =>
  (f.deps.store.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;

describe('an input twice the verified-content cache, paged', () => {
  it('is stored in chunks; every page is right and the whole never sits in memory', async () => {
    expect(count('blob_chunks')).toBe(SIZE / BLOB_CHUNK_BYTES);
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const whole = createHash('sha256');
    let offset = 0;
    let pages = 0;
    while (offset < SIZE) {
      // As get_input does: the blob, then a window a little wider than the page.
      const blob = await verifiedPages(f.deps, owner, sha256, textClassifier);
      expect(blob.size).toBe(SIZE);
      const windowStart = Math.max(0, offset - 3);
      const window = blob.read(windowStart, Math.min(SIZE, offset + MAX_GET_INPUT_BYTES + 3));
      const b = pageBounds(window, blob.text, offset - windowStart, MAX_GET_INPUT_BYTES);
      expect(windowStart + b.offset).toBe(offset);
      whole.update(window.subarray(b.offset, b.end));
      offset = windowStart + b.end;
      pages++;
      if (pages % 256 === 0) peak = Math.max(peak, process.memoryUsage().rss);
    }
    expect(pages).toBe(SIZE / MAX_GET_INPUT_BYTES);
    expect(whole.digest('hex')).toBe(sha256);
    // Holding the blob would add all of it; reading it page by page adds a few MiB.
    expect(peak - before).toBeLessThan(SIZE / 2);
  }, 300_000);

  it('a chunk changed after the first page is refused, never served', async () => {
    const blob = await verifiedPages(f.deps, owner, sha256, textClassifier);
    const at = 200 * MIB;
    expect(blob.read(at, at + 10).toString()).toBe('MiB 200 of');
    const bad = Buffer.alloc(BLOB_CHUNK_BYTES);
    bad.write('MiB 200 of the LARGE input\n');
    f.deps.store.db
      .prepare('UPDATE blob_chunks SET bytes = ? WHERE sha256 = ? AND idx = ?')
      .run(bad, sha256, at / BLOB_CHUNK_BYTES);
    expect(() => blob.read(at, at + 10)).toThrow(/does not match its digest/);
    // Other chunks still serve.
    expect(blob.read(at - MIB, at - MIB + 10).toString()).toBe('MiB 199 of');
  });

  it('a chunked blob that is collected takes its chunks with it', () => {
    f.deps.store.db.prepare('DELETE FROM blob_uploads WHERE sha256 = ?').run(sha256);
    expect(f.deps.store.blobs.deleteUnheld(f.clock.now() + 1, 10, 1)).toMatchObject({ blobs: 1 });
    expect(count('blob_chunks')).toBe(0);
  });
});
