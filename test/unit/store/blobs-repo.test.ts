import { createHash } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { collectBlobGarbage } from '../../../src/broker/loops/sweep.js';
import { verifiedBlob } from '../../../src/broker/verified-blob.js';
import { BrokerError } from '../../../src/contracts/errors.js';
import type { ManualClock } from '../../../src/platform/clock.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';
import { validSpec } from '../../support/spec.js';

const sha = (b: string) => createHash('sha256').update(b).digest('hex');
let f: BrokerFixture;
afterEach(() => f?.close());

async function upload(
  f: BrokerFixture,
  who: ReturnType<BrokerFixture['principal']>,
  path: string,
  content: string,
) {
  return (await f.invoke(who, 'upload_inputs', {
    files: [{ path, content }],
    idempotency_key: `${who.name}-${path}-${content}`,
  })) as {
    inputs: Array<{ path: string; sha256: string; size: number }>;
  };
}

describe('input blobs in the master store', () => {
  it('stores the same bytes once, whoever uploads them, and counts them in each uploader’s quota', async () => {
    f = makeBrokerDeps();
    const alice = f.principal('alice', ['submitter']);
    const bob = f.principal('bob', ['submitter']);
    await upload(f, alice, 'a.py', 'print(1)\n');
    await upload(f, bob, 'b.py', 'print(1)\n');
    const n = f.deps.store.db.prepare('SELECT count(*) AS n FROM blobs').get() as { n: number };
    expect(n.n).toBe(1);
    expect(f.deps.store.blobs.bytesOf(alice.id)).toBe(9);
    expect(f.deps.store.blobs.bytesOf(bob.id)).toBe(9);
  });

  it('collects blobs that no undecided revision or recent task names, after the grace period', async () => {
    f = makeBrokerDeps();
    const clock = f.clock as ManualClock;
    const alice = f.principal('alice', ['submitter']);
    const kept = (await upload(f, alice, 'kept.py', 'kept\n')).inputs;
    await upload(f, alice, 'orphan.py', 'orphan\n');
    const withdrawn = (await upload(f, alice, 'gone.py', 'gone\n')).inputs;
    await f.invoke(alice, 'create_proposal', { spec: validSpec({ inputs: kept }), idempotency_key: 'p1' });
    const p2 = (await f.invoke(alice, 'create_proposal', {
      spec: validSpec({ inputs: withdrawn }),
      idempotency_key: 'p2',
    })) as { proposal_id: string };
    await f.invoke(alice, 'cancel_proposal', { proposal_id: p2.proposal_id, idempotency_key: 'c2' });
    expect(collectBlobGarbage(f.deps, 60_000)).toBe(0); // all younger than the grace period
    clock.advance(120_000);
    // Uploading old content again (about to be proposed) restarts its grace period.
    await upload(f, alice, 'again.py', 'orphan\n');
    expect(collectBlobGarbage(f.deps, 60_000)).toBe(1); // only the withdrawn proposal's blob
    clock.advance(120_000);
    expect(collectBlobGarbage(f.deps, 60_000)).toBe(1);
    expect(f.deps.store.blobs.meta(sha('kept\n'))).toBeDefined();
    expect(f.deps.store.blobs.meta(sha('orphan\n'))).toBeUndefined();
    expect(f.deps.store.blobs.meta(sha('gone\n'))).toBeUndefined();
    expect(f.deps.store.blobs.bytesOf(alice.id)).toBe(5);
  });

  it('takes its grace period from storage.blob_grace_seconds (docs/performance.md "Noisy neighbours")', async () => {
    f = makeBrokerDeps({ config: { storage: { blob_grace_seconds: 60 } } });
    const clock = f.clock as ManualClock;
    const alice = f.principal('alice', ['submitter']);
    await upload(f, alice, 'orphan.py', 'orphan\n');
    clock.advance(30_000);
    expect(collectBlobGarbage(f.deps)).toBe(0);
    clock.advance(31_000);
    expect(collectBlobGarbage(f.deps)).toBe(1); // a minute, not the default day
  });

  it('keeps an upload row only for its own uploader’s reasons: another principal naming the digest keeps nothing alive', async () => {
    f = makeBrokerDeps();
    const clock = f.clock as ManualClock;
    const alice = f.principal('alice', ['submitter']);
    const bob = f.principal('bob', ['submitter']);
    await upload(f, alice, 'a.py', 'shared\n');
    const bobs = (await upload(f, bob, 'b.py', 'shared\n')).inputs;
    clock.advance(30_000);
    await upload(f, alice, 'a.py', 'shared\n'); // refreshes alice's row only
    // Bob's live draft keeps his own row (and so the blob) however old his upload is.
    await f.invoke(bob, 'create_proposal', { spec: validSpec({ inputs: bobs }), idempotency_key: 'pb' });
    clock.advance(60_000);
    expect(collectBlobGarbage(f.deps, 60_000)).toBe(0);
    expect(f.deps.store.blobs.uploadedBy(alice.id, sha('shared\n'))).toBe(false); // alice's expired
    expect(f.deps.store.blobs.uploadedBy(bob.id, sha('shared\n'))).toBe(true);
    // Alice now names it in a draft: she gets INPUT_UNKNOWN although bob's draft keeps the bytes.
    const r = (await f.invoke(alice, 'create_proposal', {
      spec: validSpec({ inputs: bobs }),
      idempotency_key: 'pa',
    })) as { findings: Array<{ code: string }>; confirmable: boolean };
    expect(r.findings.map((x) => x.code)).toContain('INPUT_UNKNOWN');
    expect(r.confirmable).toBe(false);
    // And a fresh upload is new for her again (charged to her quota).
    const again = (await f.invoke(alice, 'upload_inputs', {
      files: [{ path: 'a.py', content: 'shared\n' }],
      idempotency_key: 'again',
    })) as { stored_bytes: number };
    expect(again.stored_bytes).toBe(7);
  });

  it('answers sizesUploadedBy in one query with only the asker’s own uploads (ADR 0031)', async () => {
    f = makeBrokerDeps();
    const alice = f.principal('alice', ['submitter']);
    const bob = f.principal('bob', ['submitter']);
    const mine = (await upload(f, bob, 'b.txt', 'bob\n')).inputs[0]!;
    const theirs = (await upload(f, alice, 'a.txt', 'alice\n')).inputs[0]!;
    const shared = (await upload(f, alice, 's.txt', 'both\n')).inputs[0]!;
    await upload(f, bob, 's.txt', 'both\n');
    const many = Array.from({ length: 1500 }, (_, i) => sha(`nobody ${i}`));
    const sizes = f.deps.store.blobs.sizesUploadedBy(bob.id, [
      ...many,
      mine.sha256,
      theirs.sha256,
      shared.sha256,
      mine.sha256,
    ]);
    expect({ ...sizes }).toEqual({ [mine.sha256]: 4, [shared.sha256]: 5 });
    expect(sizes[theirs.sha256]).toBeUndefined();
    expect(sizes.constructor).toBeUndefined(); // no prototype: nothing is "owned" by accident
    expect({ ...f.deps.store.blobs.sizesUploadedBy(alice.id, [mine.sha256]) }).toEqual({});
    expect({ ...f.deps.store.blobs.sizesUploadedBy(alice.id, []) }).toEqual({});
  });

  it('never serves bytes that do not match their digest', async () => {
    f = makeBrokerDeps();
    const alice = f.principal('alice', ['submitter']);
    await upload(f, alice, 'x.py', 'good\n');
    f.deps.store.db
      .prepare('UPDATE blobs SET content = ? WHERE sha256 = ?')
      .run(Buffer.from('evil\n'), sha('good\n'));
    expect(() => verifiedBlob(f.deps, alice.id, sha('good\n'))).toThrow(BrokerError);
  });

  it('refuses deeply nested JSON in upload_inputs as invalid input, without crashing', async () => {
    f = makeBrokerDeps();
    const alice = f.principal('alice', ['submitter']);
    let deep: unknown = 'x';
    for (let i = 0; i < 5000; i++) deep = { a: deep };
    await expect(
      f.invoke(alice, 'upload_inputs', { files: [{ path: 'a.py', content: deep }], idempotency_key: 'deep' }),
    ).rejects.toMatchObject({ code: 'INVALID_INPUT' });
  });
});
