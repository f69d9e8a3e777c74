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
});
