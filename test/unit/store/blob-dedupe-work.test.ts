import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { putBlob } from '../../../src/broker/tools/inputs.js';
import { sha256Hex } from '../../../src/platform/digest.js';
import { BLOB_CHUNK_BYTES } from '../../../src/store/blobs-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';

// docs/security.md "What a reviewer must read, and what the broker guarantees": an upload's answer time must not say whether another principal stored the same
// bytes. Timing is never asserted in a test; what is asserted is the work: an upload that is new for
// its principal reads every piece of its body and writes every chunk, whether or not the bytes were
// already stored (before, a stored blob skipped both: ~150 ms of 32 MiB against ~0.1 ms).

let f: BrokerFixture;
afterEach(() => f.close());

/** Uploads `bytes` as `who` through the route's use case; counts the pieces it read. */
function upload(who: { id: string; name: string; roles: string[] }, bytes: Buffer) {
  let read = 0;
  const sha = sha256Hex(bytes);
  const pieces = function* () {
    for (let o = 0; o < bytes.length; o += BLOB_CHUNK_BYTES) {
      read++;
      yield bytes.subarray(o, o + BLOB_CHUNK_BYTES);
    }
  };
  const r = f.deps.store.transaction(() =>
    putBlob(f.deps, who as never, sha, sha, { size: bytes.length, pieces }),
  );
  return { r, read, sha };
}

describe('storing bytes another principal already stored', () => {
  for (const size of [3 * BLOB_CHUNK_BYTES + 17, 32 * BLOB_CHUNK_BYTES]) {
    it(`does the same work as storing new bytes (${size} bytes)`, () => {
      f = makeBrokerDeps({ config: { policy: { input_quota_bytes: 64 * 1024 * 1024 } } });
      const alice = f.principal('alice', ['submitter']);
      const bob = f.principal('bob', ['submitter']);
      const bytes = randomBytes(size);
      const first = upload(alice, bytes);
      const changes = () => f.deps.store.db.prepare('SELECT total_changes() AS n').get() as { n: number };
      const before = changes().n;
      const second = upload(bob, bytes);
      const written = changes().n - before;
      // Both answers say "new for me"; both read every piece.
      expect(first.r.stored).toBe(true);
      expect(second.r.stored).toBe(true);
      expect(second.read).toBe(first.read);
      // Every chunk (or the one row) was written again, beside the upload row and its audit row.
      const chunks = Math.ceil(size / BLOB_CHUNK_BYTES);
      expect(written).toBeGreaterThanOrEqual(chunks);
      // The bytes are the same ones, once.
      const n = f.deps.store.db
        .prepare('SELECT count(*) AS n FROM blob_chunks WHERE sha256 = ?')
        .get(first.sha) as { n: number };
      expect(n.n).toBe(chunks);
      // A principal that already has them (it knows it) stores nothing again and reads nothing.
      const third = upload(bob, bytes);
      expect(third.r.stored).toBe(false);
      expect(third.read).toBe(0);
    });
  }
});
