import { describe, expect, it } from 'vitest';
import type { CardSample } from '../../../../src/contracts/sample.js';
import { dirtyCardsProblem } from '../../../../worker/executions/card-check.js';

const card = (over: Partial<CardSample> = {}): CardSample => ({
  index: 0,
  uuid: 'GPU-0',
  model: 'NVIDIA H100 80GB HBM3',
  memory_used_mib: 1,
  memory_total_mib: 81559,
  utilization_pct: 0,
  temperature_c: 30,
  power_w: 70,
  health: 'ok',
  health_reasons: [],
  processes: [],
  simulated: false,
  ...over,
});
const leased = [{ index: 0, uuid: 'GPU-0' }];

describe('the cleanup receipt’s card check', () => {
  it('is clean under the threshold and names what is left over it', () => {
    expect(dirtyCardsProblem(leased, [card()])).toBeNull();
    expect(dirtyCardsProblem(leased, [card({ memory_used_mib: 4000 })])).toMatch(
      /still uses 4000 MiB of 81559 MiB \(over 2 %\)/,
    );
  });

  it('uses the master’s threshold from the plan', () => {
    expect(dirtyCardsProblem(leased, [card({ memory_used_mib: 4000 })], 10)).toBeNull();
    expect(dirtyCardsProblem(leased, [card({ memory_used_mib: 1000 })], 1)).toMatch(/over 1 %/);
  });

  it('judges a card that reports VRAM only as a percentage (hy-smi table)', () => {
    const hy = { memory_used_mib: null, memory_total_mib: null };
    expect(dirtyCardsProblem(leased, [card({ ...hy, memory_used_pct: 0 })])).toBeNull();
    expect(dirtyCardsProblem(leased, [card({ ...hy, memory_used_pct: 40 })])).toMatch(/40 % of its VRAM/);
    expect(dirtyCardsProblem(leased, [card({ ...hy, memory_used_pct: null })])).toMatch(/not measured/);
  });

  it('is not clean while a process remains, or when the card is gone', () => {
    const busy = card({ processes: [{ pid: 42, name: 'python', used_memory_mib: 10 }] });
    expect(dirtyCardsProblem(leased, [busy])).toMatch(/still has compute processes: 42 \(python\)/);
    expect(dirtyCardsProblem(leased, [card({ uuid: 'GPU-other' })])).toMatch(/missing from the sample/);
  });
});
