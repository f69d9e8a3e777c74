import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { type CardSample, CardSampleSchema } from '../../src/contracts/sample.js';
import { type CardSampler, SamplerError } from './card-sampler.js';

/** Model name of every simulated card. */
export const SIM_MODEL = 'Simulated GPU';
/** VRAM of every simulated card (80 GiB, like an H100-class board). */
export const SIM_MEMORY_TOTAL_MIB = 81920;
/** Most simulated cards one sampler may have (a hello carries at most 64 cards). */
export const SIM_MAX_CARDS = 64;

/** What a test may change on one simulated card, to make it look busy, foreign-used or unhealthy. */
export const SimCardOverrideSchema = CardSampleSchema.pick({
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

/** How many simulated cards and how they are named. */
export interface SimSamplerOptions {
  /** Number of cards, 1..64. */
  count: number;
  /** Makes the uuids differ between workers and stay the same across restarts (use the worker id). */
  seed?: string;
  /** Optional JSON file (`SimStateSchema`) re-read at every sample. */
  statePath?: string;
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

  /** Throws `RangeError` when `count` is not 1..64. */
  constructor(options: SimSamplerOptions) {
    if (!Number.isInteger(options.count) || options.count < 1 || options.count > SIM_MAX_CARDS) {
      throw new RangeError(`sim card count must be 1..${SIM_MAX_CARDS}, got ${options.count}`);
    }
    this.count = options.count;
    this.seed = options.seed ?? 'sim';
    this.statePath = options.statePath;
  }

  /** Changes card `index` from the next sample on; `null` puts it back to idle. */
  setOverride(index: number, override: SimCardOverride | null): void {
    if (override === null) this.overrides.delete(index);
    else this.overrides.set(index, SimCardOverrideSchema.parse(override));
  }

  /** One sample of all simulated cards; throws `PARSE_FAILED` when the state file is not valid. */
  async sample(): Promise<CardSample[]> {
    const fromFile = await this.readState();
    return Array.from({ length: this.count }, (_, index) => {
      const card: CardSample = {
        index,
        uuid: simCardUuid(this.seed, index),
        model: SIM_MODEL,
        memory_used_mib: 0,
        memory_total_mib: SIM_MEMORY_TOTAL_MIB,
        utilization_pct: 0,
        temperature_c: 30,
        power_w: 60,
        health: 'ok',
        health_reasons: [],
        processes: [],
        simulated: true,
      };
      for (const override of [fromFile.cards[String(index)], this.overrides.get(index)]) {
        for (const [key, value] of Object.entries(override ?? {})) {
          // Keys are those of SimCardOverrideSchema (validated), all of them CardSample fields.
          if (value !== undefined) (card as Record<string, unknown>)[key] = value;
        }
      }
      return card;
    });
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
