import { describe, expect, it } from 'vitest';
import { archiveBoundary, archivePlan } from '../../../../src/domain/retention/audit-retention.js';

/** Which prefix of the live audit chain may move to an archive file. */

const policy = {
  enabled: true,
  keep_events: 100,
  min_age_seconds: 60,
  max_segment_events: 1000,
  max_segments_per_run: 1,
};
const chain = { archived_through: 0, head_seq: 5000, verified_seq: 5000, newest_old_enough: 4000 };

describe('archiveBoundary', () => {
  it('takes the tightest of age, kept rows, the anchor and the segment size', () => {
    expect(archiveBoundary(chain, policy)).toBe(1000);
    expect(archiveBoundary({ ...chain, archived_through: 3500 }, policy)).toBe(4000);
    expect(archiveBoundary({ ...chain, archived_through: 4500, newest_old_enough: 5000 }, policy)).toBe(4900);
    expect(
      archiveBoundary(
        { ...chain, archived_through: 4500, newest_old_enough: 5000, verified_seq: 4700 },
        policy,
      ),
    ).toBe(4699);
  });

  it('never archives the newest row, whatever keep_events says', () => {
    expect(
      archiveBoundary(
        { ...chain, newest_old_enough: 5000 },
        { ...policy, keep_events: 0, max_segment_events: 1e6 },
      ),
    ).toBe(4999);
  });

  it('returns null when nothing may move', () => {
    expect(archiveBoundary(chain, { ...policy, enabled: false })).toBeNull();
    expect(archiveBoundary({ ...chain, newest_old_enough: null }, policy)).toBeNull();
    expect(archiveBoundary({ ...chain, archived_through: 4000 }, policy)).toBeNull();
    expect(archiveBoundary({ ...chain, verified_seq: 1 }, policy)).toBeNull();
  });
});

describe('archivePlan (archiving keeps up)', () => {
  const chain = { archived_through: 0, head_seq: 10_000, verified_seq: 10_000, newest_old_enough: 10_000 };
  it('plans segments back to back up to the per-run cap, and says when rows are still due', () => {
    const p = { ...policy, keep_events: 1, max_segment_events: 1000, max_segments_per_run: 4 };
    expect(archivePlan(chain, p)).toEqual({ through: [1000, 2000, 3000, 4000], more: true });
    expect(archivePlan({ ...chain, archived_through: 8000 }, p)).toEqual({
      through: [9000, 9999],
      more: false,
    });
    expect(archivePlan({ ...chain, archived_through: 9999 }, p)).toEqual({ through: [], more: false });
    expect(archivePlan(chain, { ...p, enabled: false })).toEqual({ through: [], more: false });
  });
});
