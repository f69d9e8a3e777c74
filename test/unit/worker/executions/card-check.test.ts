import { describe, expect, it } from 'vitest';
import { type CardSample, migCardIndex } from '../../../../src/contracts/sample.js';
import { dirtyCardsProblem, leasedCardsProblem } from '../../../../worker/executions/card-check.js';

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

describe('the run check on MIG cards (ADR 0046)', () => {
  const mig = {
    parent_index: 0,
    parent_uuid: 'GPU-0',
    profile: '1g.10gb',
    gpu_instance_profile: '1g.10gb',
    gpu_instance: 1,
    compute_instance: 0,
    compute_slices: 1,
    gi_access_minor: 12,
    ci_access_minor: 13,
    memory_source: 'instance' as const,
  };
  const index = migCardIndex(0, 1, 0);
  const slice = card({ index, uuid: 'MIG-a', memory_total_mib: 9984, mig });
  const parent = card({ mig_mode: 'enabled' });

  it('runs a slice whose MIG- uuid is the one leased', () => {
    expect(leasedCardsProblem([{ index, uuid: 'MIG-a' }], [parent, slice])).toBeNull();
    expect(leasedCardsProblem([{ index, uuid: 'MIG-b' }], [parent, slice])).toMatch(
      /is MIG-a on this worker/,
    );
  });

  it('refuses a whole-card plan for a card in MIG mode, and a slice without capability minors', () => {
    expect(leasedCardsProblem([{ index: 0, uuid: 'GPU-0' }], [parent, slice])).toMatch(/in MIG mode/);
    const blind = card({ index, uuid: 'MIG-a', mig: { ...mig, ci_access_minor: null } });
    expect(leasedCardsProblem([{ index, uuid: 'MIG-a' }], [parent, blind])).toMatch(
      /MIG slice 0:mig:1\/0 has no known capability nodes/,
    );
  });
});
