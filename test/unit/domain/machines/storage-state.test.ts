import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  growthFits,
  storageAcceptsGrowth,
  storageState,
} from '../../../../src/domain/machines/storage-state.js';

const limits = { warn_free_bytes: 1000, min_free_bytes: 100 };

describe('storageState', () => {
  it('maps free space and write failures to a state', () => {
    expect(storageState({ free_bytes: 5000, write_failure: null }, limits)).toBe('ok');
    expect(storageState({ free_bytes: 999, write_failure: null }, limits)).toBe('low');
    expect(storageState({ free_bytes: 99, write_failure: null }, limits)).toBe('refusing');
    expect(storageState({ free_bytes: 5000, write_failure: 'SQLITE_FULL' }, limits)).toBe('unwritable');
    // Unknown free space counts as enough; a write failure still wins.
    expect(storageState({ free_bytes: null, write_failure: null }, limits)).toBe('ok');
    // min above warn: the warning starts at min too, never "refusing" without having warned.
    expect(
      storageState({ free_bytes: 150, write_failure: null }, { warn_free_bytes: 0, min_free_bytes: 200 }),
    ).toBe('refusing');
    // min 0 turns the refusal off.
    expect(
      storageState({ free_bytes: 0, write_failure: null }, { warn_free_bytes: 0, min_free_bytes: 0 }),
    ).toBe('ok');
  });

  it('accepts growth exactly when free space is at or above the floor and no write failed', () => {
    fc.assert(
      fc.property(
        fc.option(fc.nat(), { nil: null }),
        fc.option(fc.string({ minLength: 1 }), { nil: null }),
        fc.nat(),
        fc.nat(),
        (free, failure, warn, min) => {
          const state = storageState(
            { free_bytes: free, write_failure: failure },
            { warn_free_bytes: warn, min_free_bytes: min },
          );
          const expected = failure === null && (free === null || free >= min);
          expect(storageAcceptsGrowth(state)).toBe(expected);
        },
      ),
    );
  });
});

describe('growthFits (reserved, not sampled)', () => {
  it('admits a write only if free − reserved − its size stays at or above the floor', () => {
    expect(growthFits({ free_bytes: 1000, reserved_bytes: 0, bytes: 900 }, limits)).toBe(true);
    expect(growthFits({ free_bytes: 1000, reserved_bytes: 0, bytes: 901 }, limits)).toBe(false);
    // What writes in flight hold counts, although the sample does not show it yet.
    expect(growthFits({ free_bytes: 1000, reserved_bytes: 500, bytes: 401 }, limits)).toBe(false);
    expect(growthFits({ free_bytes: null, reserved_bytes: 5000, bytes: 5000 }, limits)).toBe(true);
    expect(
      growthFits({ free_bytes: 0, reserved_bytes: 0, bytes: 10 }, { warn_free_bytes: 0, min_free_bytes: 0 }),
    ).toBe(true);
  });

  it('no sequence of admitted writes ends under the floor', () => {
    fc.assert(
      fc.property(fc.nat(1_000_000), fc.array(fc.nat(100_000), { maxLength: 50 }), (free, sizes) => {
        let reserved = 0;
        for (const bytes of sizes)
          if (growthFits({ free_bytes: free, reserved_bytes: reserved, bytes }, limits)) reserved += bytes;
        return reserved === 0 || free - reserved >= limits.min_free_bytes;
      }),
    );
  });
});
