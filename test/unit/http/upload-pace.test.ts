import { describe, expect, it } from 'vitest';
import { UploadPace } from '../../../src/http/upload-pace.js';
import { MasterConfigSchema } from '../../../src/platform/config.js';

const MIB = 1024 * 1024;

describe('UploadPace: a byte rate per principal, shared by its uploads', () => {
  it('lets a second of bytes through at once, then asks the sender to wait for what it owes', () => {
    const pace = new UploadPace(8 * MIB);
    expect(pace.take('alice', 8 * MIB, 0)).toBe(0);
    // 1 MiB more at the same instant: owed 1/8 s.
    expect(pace.take('alice', MIB, 0)).toBe(125);
    // After that wait the debt is paid, and the next MiB is owed again at the full rate.
    expect(pace.take('alice', MIB, 125)).toBe(125);
  });

  it("one principal's debt is not another's; its uploads share one bucket", () => {
    const pace = new UploadPace(4 * MIB);
    pace.take('alice', 4 * MIB, 0);
    expect(pace.take('bob', 4 * MIB, 0)).toBe(0);
    // Alice's second upload draws on the same bucket as her first.
    expect(pace.take('alice', 2 * MIB, 0)).toBe(500);
  });

  it('refills at the rate, never above one second of bytes', () => {
    const pace = new UploadPace(MIB);
    pace.take('alice', MIB, 0);
    // Ten idle seconds refill one second's worth, not ten.
    expect(pace.take('alice', MIB, 10_000)).toBe(0);
    expect(pace.take('alice', MIB / 2, 10_000)).toBe(500);
  });

  it('does not set timers for tiny debts; 0 turns pacing off', () => {
    const pace = new UploadPace(MIB);
    pace.take('alice', MIB, 0);
    expect(pace.take('alice', 1024, 0)).toBe(0);
    const off = new UploadPace(0);
    expect(off.take('alice', 1024 * MIB, 0)).toBe(0);
  });

  it('forgets buckets that have refilled', () => {
    const pace = new UploadPace(MIB);
    pace.take('alice', MIB, 0);
    pace.take('bob', MIB / 4, 0);
    expect(pace.sweep(500)).toBe(1);
    expect(pace.sweep(1000)).toBe(0);
  });
});

describe('http.upload_bytes_per_second_per_principal', () => {
  it('is refused below what the principal’s uploads in flight need at the minimum body rate', () => {
    const bad = MasterConfigSchema.safeParse({
      http: { upload_bytes_per_second_per_principal: 100_000, max_uploads_per_principal: 4 },
    });
    expect(bad.success).toBe(false);
    expect(JSON.stringify(bad.error?.issues)).toMatch(
      /at least max_uploads_per_principal × min_body_bytes_per_second \(262144\)/,
    );
    expect(MasterConfigSchema.safeParse({ http: { upload_bytes_per_second_per_principal: 0 } }).success).toBe(
      true,
    );
    expect(MasterConfigSchema.parse({}).http.upload_bytes_per_second_per_principal).toBe(64 * MIB);
  });

  it('is refused where a paced upload’s wait for one socket read would near the idle cut (body_timeout_ms)', () => {
    // 4 uploads × 64 KiB at 1 MiB/s: a piece may wait 250 ms, more than half of a 400 ms body timeout.
    const http = { max_uploads_per_principal: 4, min_body_bytes_per_second: 1000 };
    const bad = MasterConfigSchema.safeParse({
      http: { ...http, upload_bytes_per_second_per_principal: MIB, body_timeout_ms: 400 },
    });
    expect(bad.success).toBe(false);
    expect(JSON.stringify(bad.error?.issues)).toMatch(/may wait 250 ms for one socket read/);
    expect(
      MasterConfigSchema.safeParse({
        http: { ...http, upload_bytes_per_second_per_principal: MIB, body_timeout_ms: 500 },
      }).success,
    ).toBe(true);
  });
});
