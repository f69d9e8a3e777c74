import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { type CardSample, CardSampleObjectSchema, migCardIndex } from '../../src/contracts/sample.js';
import { MAX_SAMPLE_CARDS } from '../../src/contracts/worker-protocol.js';
import { type CardSampler, SamplerError } from './card-sampler.js';

/** Model name of every simulated card. */
export const SIM_MODEL = 'Simulated GPU';
/** VRAM of every simulated card (80 GiB, like an H100-class board). */
export const SIM_MEMORY_TOTAL_MIB = 81920;
/** Most simulated cards one sampler may have (a hello carries at most 64 cards). */
export const SIM_MAX_CARDS = 64;

/** What a test may change on one simulated card, to make it look busy, foreign-used or unhealthy. */
export const SimCardOverrideSchema = CardSampleObjectSchema.pick({
  memory_used_mib: true,
  utilization_pct: true,
  temperature_c: true,
  power_w: true,
  health: true,
  health_reasons: true,
  processes: true,
})
  .partial()
  .strict();
/** Changes to one simulated card. */
export type SimCardOverride = z.infer<typeof SimCardOverrideSchema>;

/**
 * The optional sim state file, re-read at every sample so a test can change cards of a worker running in
 * another process. Example: `{"cards": {"1": {"memory_used_mib": 40000, "processes":
 * [{"pid": 4242, "name": "python", "used_memory_mib": 40000}]}}}`. A missing file means no changes.
 */
export const SimStateSchema = z
  .object({ cards: z.record(z.string().regex(/^\d+$/), SimCardOverrideSchema) })
  .strict();
/** Contents of the sim state file. */
export type SimState = z.infer<typeof SimStateSchema>;

/**
 * One MIG instance every simulated card is split into: what `parseSimMigLayout` (sim-mig-layout.ts, which
 * validates the layout) returns per instance, the part the sampler reports.
 */
export interface SimSliceSpec {
  profile: string;
  compute_slices: number;
  memory_mib: number;
  /** Its GPU-instance id; its one compute instance is 0. */
  gpu_instance: number;
}

/** How many simulated cards and how they are named. */
export interface SimSamplerOptions {
  /** Number of cards, 1..64. */
  count: number;
  /** Makes the uuids differ between workers and stay the same across restarts (use the worker id). */
  seed?: string;
  /** Optional JSON file (`SimStateSchema`) re-read at every sample. */
  statePath?: string;
  /**
   * `--gpus sim:N:mig=<layout>` (worker/samplers/sim-mig-layout.ts): every card is in MIG mode, split
   * into these instances, each reported as a simulated slice of its own (ADR 0046).
   */
  mig?: readonly SimSliceSpec[];
}

/**
 * The capability minors the driver gives GPU instance `gi` (and its compute instance `ci`) of GPU `g`
 * in /proc/driver/nvidia-caps/mig-minors: `gpu<g>/gi<i>/access` is 3 + 135·g + 9·i, its `ci<c>` that
 * plus 1 + c (config and monitor take 1 and 2).
 */
export function simMigMinors(g: number, gi: number, ci: number): { gi: number; ci: number } {
  const giMinor = 3 + 135 * g + 9 * gi;
  return { gi: giMinor, ci: giMinor + 1 + ci };
}

/** A simulated slice's `MIG-` uuid: derived from the seed like a card's, and saying it is simulated. */
export function simMigUuid(seed: string, index: number): string {
  return `MIG-${simCardUuid(seed, index)}`;
}

/** A deterministic uuid for simulated card `index`, shaped like nvidia's (`SIM-xxxxxxxx-xxxx-…`). */
export function simCardUuid(seed: string, index: number): string {
  const hex = createHash('sha256').update(`${seed}:${index}`).digest('hex');
  return `SIM-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/**
 * Simulated cards for hosts without GPUs: idle, healthy, `simulated: true`. Tests make a card busy,
 * foreign-used or unhealthy with `setOverride` (same process) or the state file (worker in a child
 * process); the file's changes apply first, then `setOverride`'s.
 */
export class SimSampler implements CardSampler {
  /** Always `sim`. */
  readonly provider = 'sim' as const;
  /** How many cards this sampler simulates. */
  readonly count: number;
  private readonly seed: string;
  private readonly statePath: string | undefined;
  private readonly overrides = new Map<number, SimCardOverride>();
  /** The MIG layout of every card, or null when the cards are whole. */
  readonly mig: readonly SimSliceSpec[] | null;

  /** Throws `RangeError` when `count` is not 1..64, or cards and slices are more than a sample carries. */
  constructor(options: SimSamplerOptions) {
    if (!Number.isInteger(options.count) || options.count < 1 || options.count > SIM_MAX_CARDS) {
      throw new RangeError(`sim card count must be 1..${SIM_MAX_CARDS}, got ${options.count}`);
    }
    const perCard = 1 + (options.mig?.length ?? 0);
    if (options.count * perCard > MAX_SAMPLE_CARDS) {
      throw new RangeError(
        `sim:${options.count} with ${perCard - 1} MIG slices each is ${options.count * perCard} cards; a sample carries at most ${MAX_SAMPLE_CARDS} (use at most ${Math.floor(MAX_SAMPLE_CARDS / perCard)} cards)`,
      );
    }
    this.count = options.count;
    this.mig = options.mig && options.mig.length > 0 ? options.mig : null;
    this.seed = options.seed ?? 'sim';
    this.statePath = options.statePath;
  }

  /** Changes card `index` from the next sample on; `null` puts it back to idle. */
  setOverride(index: number, override: SimCardOverride | null): void {
    if (override === null) this.overrides.delete(index);
    else this.overrides.set(index, SimCardOverrideSchema.parse(override));
  }

  /**
   * One sample of all simulated cards, each card's MIG slices (if any) after the cards; throws
   * `PARSE_FAILED` when the state file is not valid.
   */
  async sample(): Promise<CardSample[]> {
    const fromFile = await this.readState();
    const cards: CardSample[] = [];
    for (let index = 0; index < this.count; index++) {
      cards.push({
        ...this.idle(index, simCardUuid(this.seed, index), SIM_MEMORY_TOTAL_MIB),
        // nvidia-smi prints utilization.gpu [N/A] for a card in MIG mode.
        ...(this.mig ? { mig_mode: 'enabled' as const, utilization_pct: null } : {}),
      });
    }
    for (let parent = 0; this.mig && parent < this.count; parent++) {
      for (const instance of this.mig) {
        const index = migCardIndex(parent, instance.gpu_instance, 0);
        const minors = simMigMinors(parent, instance.gpu_instance, 0);
        cards.push({
          ...this.idle(index, simMigUuid(this.seed, index), instance.memory_mib),
          // As the nvidia sampler reports a slice: memory per instance, no utilisation, temperature or power.
          utilization_pct: null,
          temperature_c: null,
          power_w: null,
          mig: {
            parent_index: parent,
            parent_uuid: simCardUuid(this.seed, parent),
            profile: instance.profile,
            gpu_instance_profile: instance.profile,
            gpu_instance: instance.gpu_instance,
            compute_instance: 0,
            compute_slices: instance.compute_slices,
            gi_access_minor: minors.gi,
            ci_access_minor: minors.ci,
            memory_source: 'profile-table',
          },
        });
      }
    }
    for (const card of cards) {
      for (const override of [fromFile.cards[String(card.index)], this.overrides.get(card.index)]) {
        for (const [key, value] of Object.entries(override ?? {})) {
          // Keys are those of SimCardOverrideSchema (validated), all of them CardSample fields.
          if (value !== undefined) (card as Record<string, unknown>)[key] = value;
        }
      }
    }
    return cards;
  }

  /** The capability minors of every simulated slice (GPU and compute instance), for their stand-in nodes. */
  capabilityMinors(): number[] {
    const minors: number[] = [];
    for (let parent = 0; this.mig && parent < this.count; parent++) {
      for (const instance of this.mig) {
        const m = simMigMinors(parent, instance.gpu_instance, 0);
        minors.push(m.gi, m.ci);
      }
    }
    return minors;
  }

  private idle(index: number, uuid: string, memoryTotalMib: number): CardSample {
    return {
      index,
      uuid,
      model: SIM_MODEL,
      memory_used_mib: 0,
      memory_total_mib: memoryTotalMib,
      utilization_pct: 0,
      temperature_c: 30,
      power_w: 60,
      health: 'ok',
      health_reasons: [],
      processes: [],
      simulated: true,
    };
  }

  private async readState(): Promise<SimState> {
    if (this.statePath === undefined) return { cards: {} };
    let text: string;
    try {
      text = await readFile(this.statePath, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { cards: {} };
      throw new SamplerError('TOOL_FAILED', `sim state ${this.statePath} cannot be read: ${String(error)}`, {
        tool: 'sim',
      });
    }
    try {
      return SimStateSchema.parse(JSON.parse(text));
    } catch (error) {
      throw new SamplerError('PARSE_FAILED', `sim state ${this.statePath} is not valid: ${String(error)}`, {
        tool: 'sim',
      });
    }
  }
}
