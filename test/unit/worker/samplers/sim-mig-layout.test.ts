import { describe, expect, it } from 'vitest';
import { BrokerError } from '../../../../src/contracts/errors.js';
import {
  isSimMigOption,
  parseSimMigLayout,
  parseSimMigOption,
  type SimMigLayoutReason,
} from '../../../../worker/samplers/sim-mig-layout.js';

function reasonOf(run: () => unknown): { reason: SimMigLayoutReason; hint: string } {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(BrokerError);
    const broker = error as BrokerError;
    expect(broker.code).toBe('INVALID_INPUT');
    expect(broker.hint).not.toBe('');
    return { reason: (broker.details as { reason: SimMigLayoutReason }).reason, hint: broker.hint };
  }
  throw new Error('expected a refusal');
}

describe('parseSimMigOption', () => {
  it('reads the issue’s example and places each instance where nvidia-smi mig -cgi could', () => {
    expect(parseSimMigOption('sim:2:mig=3g.40gb+2g.20gb+1g.10gb')).toEqual({
      count: 2,
      model: 'H100-80GB',
      layout: [
        {
          profile: '3g.40gb',
          profile_id: 9,
          compute_slices: 3,
          memory_mib: 40448,
          gpu_instance: 1,
          placement: { start: 0, size: 4 },
        },
        {
          profile: '2g.20gb',
          profile_id: 14,
          compute_slices: 2,
          memory_mib: 20091,
          gpu_instance: 2,
          placement: { start: 4, size: 2 },
        },
        {
          profile: '1g.10gb',
          profile_id: 19,
          compute_slices: 1,
          memory_mib: 9984,
          gpu_instance: 3,
          placement: { start: 6, size: 1 },
        },
      ],
    });
  });

  it('reads repeats and every full seven-slice layout of the MIG guide', () => {
    expect(parseSimMigOption('sim:1:mig=1g.10gb*7').layout.map((i) => i.placement.start)).toEqual([
      0, 1, 2, 3, 4, 5, 6,
    ]);
    for (const layout of [
      '7g.80gb',
      '4g.40gb+3g.40gb',
      '3g.40gb+3g.40gb',
      '4g.40gb+2g.20gb+1g.10gb',
      '2g.20gb*3+1g.10gb',
      '3g.40gb+2g.20gb+1g.10gb*2',
      '1g.20gb*4',
      '1g.10gb+me+1g.10gb*6',
    ]) {
      expect(() => parseSimMigLayout(layout), layout).not.toThrow();
    }
    expect(parseSimMigLayout('1g.18gb*7', 'H200')).toHaveLength(7);
    expect(parseSimMigLayout('3g.20gb+2g.10gb+1g.5gb*2', 'A100-40GB')).toHaveLength(4);
  });

  it('refuses layouts that do not fit, each with its reason and a hint', () => {
    expect(reasonOf(() => parseSimMigLayout('1g.10gb*8')).reason).toBe('TOO_MANY_INSTANCES');
    expect(reasonOf(() => parseSimMigLayout('4g.40gb+4g.40gb')).reason).toBe('TOO_MANY_SLICES');
    expect(reasonOf(() => parseSimMigLayout('7g.80gb+1g.10gb')).reason).toBe('TOO_MANY_SLICES');
    expect(reasonOf(() => parseSimMigLayout('1g.10gb+me*2')).reason).toBe('TOO_MANY_OF_PROFILE');
    expect(reasonOf(() => parseSimMigLayout('1g.20gb*5')).reason).toBe('TOO_MANY_OF_PROFILE');
    expect(reasonOf(() => parseSimMigLayout('1g.10gb*4+1g.10gb*4')).reason).toBe('TOO_MANY_INSTANCES');
    // Within every count, but 3g sits at 0 or 4 and takes four memory slots, a 1g.20gb two: no placement.
    expect(reasonOf(() => parseSimMigLayout('3g.40gb+3g.40gb+1g.10gb')).reason).toBe('NO_PLACEMENT');
    expect(reasonOf(() => parseSimMigLayout('1g.20gb*3+3g.40gb')).reason).toBe('NO_PLACEMENT');
  });

  it('refuses profiles of another board, naming the valid ones', () => {
    const refused = reasonOf(() => parseSimMigLayout('1g.5gb'));
    expect(refused.reason).toBe('UNKNOWN_PROFILE');
    expect(refused.hint).toContain('1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb');
    expect(reasonOf(() => parseSimMigLayout('3g.40gb', 'H200')).reason).toBe('UNKNOWN_PROFILE');
  });

  it('refuses what a hostile or careless caller might write', () => {
    for (const bad of [
      'sim:2:mig=',
      'sim:2:mig=3g.40gb++1g.10gb',
      'sim:2:mig=+1g.10gb',
      'sim:2:mig=1g.10gb*0',
      'sim:2:mig=1g.10gb*99',
      'sim:2:mig=1g.10gb**2',
      'sim:2:mig=1g.10gb;rm -rf /',
      'sim:2:mig=1G.10GB',
      `sim:2:mig=${'1g.10gb+'.repeat(40)}1g.10gb`,
      'sim:x:mig=1g.10gb',
      'sim:2:mig=1g.10gb\n',
    ]) {
      expect(['SYNTAX', 'UNKNOWN_PROFILE'], bad).toContain(reasonOf(() => parseSimMigOption(bad)).reason);
    }
    expect(reasonOf(() => parseSimMigOption('sim:0:mig=1g.10gb')).reason).toBe('COUNT');
    expect(reasonOf(() => parseSimMigOption('sim:65:mig=1g.10gb')).reason).toBe('COUNT');
  });

  it('tells a MIG sim option from the others', () => {
    expect(isSimMigOption('sim:2:mig=1g.10gb')).toBe(true);
    expect(isSimMigOption('sim:2')).toBe(false);
    expect(isSimMigOption('auto')).toBe(false);
  });
});
