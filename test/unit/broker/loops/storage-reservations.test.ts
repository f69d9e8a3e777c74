import { describe, expect, it } from 'vitest';
import { StorageGuard } from '../../../../src/broker/loops/storage-guard.js';
import { BrokerError } from '../../../../src/contracts/errors.js';
import { ManualClock } from '../../../../src/platform/clock.js';
import { Store } from '../../../../src/store/store.js';

/** The storage guard's reservation ledger (ADR 0024): free − reserved ≥ floor for every admission. */

const MiB = 1024 * 1024;

async function guardWith(free: number) {
  const store = Store.open(':memory:');
  const guard = new StorageGuard(store, new ManualClock(), {
    dataDir: '/',
    warn_free_bytes: 0,
    min_free_bytes: 100 * MiB,
    statfs: async () => ({ free_bytes: free, total_bytes: 10 * free }),
  });
  await guard.check();
  return { guard, store };
}

describe('StorageGuard reservations', () => {
  it('admits concurrent writes only while all of them together stay above the floor', async () => {
    const { guard, store } = await guardWith(400 * MiB);
    const a = guard.reserve('upload a', 200 * MiB);
    expect(() => guard.reserve('upload b', 101 * MiB)).toThrow(BrokerError);
    const b = guard.reserve('upload b', 100 * MiB);
    expect(guard.reservedBytes()).toBe(300 * MiB);
    // Small synchronous writes see the reservations too.
    expect(() => guard.assertAcceptsGrowth('create_proposal', 1)).toThrow(/reserved by writes in flight/);
    a.release(); // failed: wrote nothing
    a.release(); // releasing twice changes nothing
    expect(guard.reservedBytes()).toBe(100 * MiB);
    b.release(100 * MiB); // landed: counted off the sample until the next statfs
    expect(guard.reservedBytes()).toBe(0);
    expect(guard.status().free_bytes).toBe(300 * MiB);
    expect(guard.acceptsGrowth()).toBe(true);
    store.close();
  });

  it('refuses with a retryable UNAVAILABLE that names the floor', async () => {
    const { guard, store } = await guardWith(150 * MiB);
    try {
      guard.reserve('input upload', 60 * MiB);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(BrokerError);
      expect((err as BrokerError).code).toBe('UNAVAILABLE');
      expect((err as BrokerError).retryable).toBe(true);
      expect((err as BrokerError).message).toContain('storage.min_free_bytes');
    }
    store.close();
  });
});
