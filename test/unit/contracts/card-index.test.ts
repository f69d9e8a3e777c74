import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CardSampleSchema,
  cardKey,
  cardLabel,
  MAX_CARD_INDEX,
  migCardIndex,
  parseCardLabel,
} from '../../../src/contracts/sample.js';
import { HelloSchema, MAX_SAMPLE_CARDS } from '../../../src/contracts/worker-protocol.js';

// ADR 0046: a MIG slice is a card whose index encodes parent, GPU instance and compute instance.

const whole = {
  index: 0,
  uuid: 'GPU-0',
  model: 'NVIDIA H100 80GB HBM3',
  memory_used_mib: 0,
  memory_total_mib: 81559,
  utilization_pct: 0,
  temperature_c: 30,
  power_w: 60,
  health: 'ok' as const,
  health_reasons: [],
  processes: [],
  simulated: false,
};
const mig = {
  parent_index: 0,
  parent_uuid: 'GPU-0',
  profile: '3g.40gb',
  gpu_instance_profile: '3g.40gb',
  gpu_instance: 2,
  compute_instance: 0,
  compute_slices: 3,
  gi_access_minor: 21,
  ci_access_minor: 22,
  memory_source: 'instance' as const,
};

describe('card indexes', () => {
  it('encodes and decodes every slice, never onto a whole card or another slice', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 255 }),
        fc.integer({ min: 0, max: 14 }),
        fc.integer({ min: 0, max: 7 }),
        (parent, gi, ci) => {
          const index = migCardIndex(parent, gi, ci);
          expect(index).toBeGreaterThanOrEqual(256);
          expect(index).toBeLessThanOrEqual(MAX_CARD_INDEX);
          expect(cardKey(index)).toEqual({ kind: 'mig', parent, gi, ci });
          expect(parseCardLabel(cardLabel(index))).toBe(index);
        },
      ),
    );
    expect(cardKey(7)).toEqual({ kind: 'card', index: 7 });
    expect(cardLabel(migCardIndex(0, 2, 0))).toBe('0:mig:2/0');
    expect(MAX_CARD_INDEX).toBe(migCardIndex(255, 14, 7));
  });

  it('refuses indexes and labels no card has', () => {
    expect(cardKey(256 + 15 * 8)).toBeNull(); // GI 15 does not exist
    expect(cardKey(MAX_CARD_INDEX + 1)).toBeNull();
    expect(cardKey(-1)).toBeNull();
    for (const bad of ['256', '0:mig:15/0', '0:mig:2/8', '0:mig:2', 'x', '256:mig:0/0', ''])
      expect(parseCardLabel(bad)).toBeNull();
    expect(() => migCardIndex(0, 15, 0)).toThrow(RangeError);
  });

  it('a sample card is a slice exactly when its index says so, and its mig block matches it', () => {
    const slice = { ...whole, index: migCardIndex(0, 2, 0), uuid: 'MIG-a', memory_total_mib: 40192, mig };
    expect(CardSampleSchema.safeParse(slice).success).toBe(true);
    expect(CardSampleSchema.safeParse({ ...whole, mig_mode: 'enabled' }).success).toBe(true);
    // Attacks: a slice index without its block, a block on a whole card, a block naming another slice.
    expect(CardSampleSchema.safeParse({ ...slice, mig: undefined }).success).toBe(false);
    expect(CardSampleSchema.safeParse({ ...whole, mig }).success).toBe(false);
    expect(CardSampleSchema.safeParse({ ...slice, mig: { ...mig, gpu_instance: 3 } }).success).toBe(false);
    expect(CardSampleSchema.safeParse({ ...slice, mig_mode: 'enabled' }).success).toBe(false);
    expect(CardSampleSchema.safeParse({ ...whole, index: 256 + 15 * 8, mig }).success).toBe(false);
    // A worker cannot put terminal escapes or words into what the profile column shows.
    for (const profile of ['1g.10gb\u001b[2J', '1g 10gb', 'rm -rf', ''])
      expect(CardSampleSchema.safeParse({ ...slice, mig: { ...mig, profile } }).success).toBe(false);
  });

  it('a hello carries up to 128 cards, and an older hello without MIG fields still parses', () => {
    const hello = {
      type: 'hello',
      protocol_version: 1,
      worker_id: 'w1',
      boot_id: 'b1',
      version: '1',
      hostname: 'h',
      provider: 'nvidia',
      executions: [],
      master_marks: [],
    };
    const cards = (n: number) =>
      Array.from({ length: n }, (_, index) => ({ ...whole, index: index % 256, uuid: `GPU-${index}` }));
    expect(MAX_SAMPLE_CARDS).toBe(128);
    expect(HelloSchema.safeParse({ ...hello, cards: cards(128) }).success).toBe(true);
    expect(HelloSchema.safeParse({ ...hello, cards: cards(129) }).success).toBe(false);
    expect(HelloSchema.safeParse({ ...hello, cards: [whole] }).success).toBe(true);
  });
});
