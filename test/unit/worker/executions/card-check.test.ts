import { describe, expect, it } from 'vitest';
import { type CardSample, migCardIndex } from '../../../../src/contracts/sample.js';
import {
  cardLostSummary,
  dirtyCardsProblem,
  goneCardsProblem,
  leasedCardsProblem,
} from '../../../../worker/executions/card-check.js';
import { finalSummary } from '../../../../worker/executions/reports.js';

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

describe('the cleanup check of a MIG compute instance that shares its GPU instance (ADR 0046 §7)', () => {
  // GPU instance 1 split into two compute instances: nvidia-smi gives both rows the GPU instance's memory.
  const ci = (n: number): CardSample =>
    card({
      index: migCardIndex(0, 1, n),
      uuid: `MIG-ci${n}`,
      memory_used_mib: 20_000,
      memory_total_mib: 40_192,
      mig: {
        parent_index: 0,
        parent_uuid: 'GPU-0',
        profile: '1c.3g.40gb',
        gpu_instance_profile: '3g.40gb',
        gpu_instance: 1,
        compute_instance: n,
        compute_slices: 1,
        gi_access_minor: 12,
        ci_access_minor: 13 + n,
        memory_source: 'instance',
      },
    });
  const other = card({
    index: migCardIndex(0, 2, 0),
    uuid: 'MIG-other',
    memory_used_mib: 20_000,
    memory_total_mib: 40_192,
    mig: { ...ci(0).mig!, gpu_instance: 2, compute_instance: 0 },
  });
  const sampled = [card({ mig_mode: 'enabled' }), ci(0), ci(1), other];
  const mine = [{ index: migCardIndex(0, 1, 0), uuid: 'MIG-ci0' }];

  it('does not judge the memory while another task holds a sibling compute instance: it is theirs too', () => {
    expect(dirtyCardsProblem(mine, sampled, 2, new Set([migCardIndex(0, 1, 1)]))).toBeNull();
  });

  it('judges it as before when no sibling is held by another task (the memory is its own), or only another GPU instance is', () => {
    expect(dirtyCardsProblem(mine, sampled)).toMatch(/still uses 20000 MiB of 40192 MiB/);
    expect(dirtyCardsProblem(mine, sampled, 2, new Set([migCardIndex(0, 2, 0)]))).toMatch(/still uses/);
    // Processes are still a problem whoever else holds a sibling.
    const busy = sampled.map((c) =>
      c.index === mine[0]!.index ? { ...c, processes: [{ pid: 7, name: 'x', used_memory_mib: 1 }] } : c,
    );
    expect(dirtyCardsProblem(mine, busy, 2, new Set([migCardIndex(0, 1, 1)]))).toMatch(
      /compute processes: 7/,
    );
  });
});

describe('a leased card gone under a running task (ADR 0046 §7)', () => {
  const slice = migCardIndex(0, 2, 0);
  const leasedSlice = [{ index: slice, uuid: 'MIG-a' }];
  const parent = card({ mig_mode: 'enabled' });

  it('names a card or slice the sample no longer lists, and one listed with another uuid', () => {
    expect(goneCardsProblem(leased, [card()])).toBeNull();
    expect(goneCardsProblem(leased, [card({ index: 1, uuid: 'GPU-1' })])).toBe(
      'leased card gone: 0 (GPU-0) is no longer on this worker',
    );
    expect(goneCardsProblem(leasedSlice, [parent])).toBe(
      'leased card gone: 0:mig:2/0 (MIG-a) is no longer on this worker',
    );
    // Re-created at the same GI/CI ids: same index, a new MIG- uuid.
    expect(goneCardsProblem(leasedSlice, [parent, card({ index: slice, uuid: 'MIG-b' })])).toBe(
      'leased card gone: 0:mig:2/0 is now MIG-b, not MIG-a as leased',
    );
  });

  it('trusts no empty or missing sample to say a card is gone', () => {
    expect(goneCardsProblem(leased, [])).toBeNull();
    expect(goneCardsProblem(leased, null)).toBeNull();
  });

  const exit = {
    exit_code: 0,
    signal: null,
    failure_reason: 'CANCELLED' as const,
    outputs: [],
  };
  const lost = 'leased card gone: 0:mig:2/0 (MIG-a) is no longer on this worker';

  it('turns the stop into CARD_LOST, even when the task trapped SIGTERM and exited 0', () => {
    expect(cardLostSummary(exit, lost)).toEqual({
      ...exit,
      failure_reason: 'CARD_LOST',
      detail: `${lost}; the run ended CANCELLED`,
    });
    // A task that failed on its own once its slice went (a CUDA error) is CARD_LOST too, its detail kept.
    expect(
      cardLostSummary({ ...exit, exit_code: 1, failure_reason: 'EXIT_NONZERO', detail: 'x' }, lost),
    ).toMatchObject({ failure_reason: 'CARD_LOST', detail: `${lost}; the run ended EXIT_NONZERO; x` });
  });

  it('leaves a clean exit and a run with no card gone as they are', () => {
    expect(cardLostSummary({ ...exit, failure_reason: null }, lost).failure_reason).toBeNull();
    expect(cardLostSummary(exit, null)).toBe(exit);
  });

  it('keeps the gone card ahead of the cleanup receipt that cannot confirm it', () => {
    const done = {
      ...exit,
      output_errors: [],
      log_errors: [],
      outputs: [],
      cleaned: false,
      cleanup_detail: 'card 0:mig:2/0 (MIG-a) is missing from the sample',
    };
    const reported = cardLostSummary(exit, lost);
    expect(finalSummary(done, reported).detail).toBe(
      `${lost}; the run ended CANCELLED; cleanup: card 0:mig:2/0 (MIG-a) is missing from the sample`,
    );
    expect(finalSummary(done, exit).detail).toBe('card 0:mig:2/0 (MIG-a) is missing from the sample');
  });
});
