import { describe, expect, it } from 'vitest';
import { usageRows } from '../../../../src/domain/accounts/usage.js';

describe('usage rows of a lease', () => {
  const h100 = { model: 'NVIDIA H100 80GB HBM3', simulated: false };
  const sim = { model: 'SIM-GPU', simulated: true };

  it('one row per model and simulated or not, cards × whole seconds held (a started second counts)', () => {
    const rows = usageRows([h100, h100, sim], 1_000, 61_001);
    expect(rows).toEqual([
      {
        model: h100.model,
        simulated: false,
        cards: 2,
        started_at: 1_000,
        ended_at: 61_001,
        card_seconds: 122,
      },
      { model: 'SIM-GPU', simulated: true, cards: 1, started_at: 1_000, ended_at: 61_001, card_seconds: 61 },
    ]);
  });

  it('a clock that went backwards charges nothing, never a negative amount', () => {
    expect(usageRows([h100], 5_000, 1_000)).toEqual([
      { model: h100.model, simulated: false, cards: 1, started_at: 5_000, ended_at: 5_000, card_seconds: 0 },
    ]);
  });

  it('a MIG slice is charged as its share of a card, rounded up to a whole card-second (ADR 0046)', () => {
    const slice = { model: 'NVIDIA H100 80GB HBM3 MIG 1g.10gb', simulated: false, mig_slices: 1 };
    expect(usageRows([slice], 0, 70_000)).toEqual([
      { model: slice.model, simulated: false, cards: 1, started_at: 0, ended_at: 70_000, card_seconds: 10 },
    ]);
    // Two 3g slices of one lease: 6/7 of a card for 61 s is 52.3, charged 53.
    const big = { model: 'NVIDIA H100 80GB HBM3 MIG 3g.40gb', simulated: false, mig_slices: 3 };
    expect(usageRows([big, big], 0, 61_000)[0]?.card_seconds).toBe(53);
  });
});
