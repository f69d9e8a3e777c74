import { hostname as osHostname } from 'node:os';
import type { Provider } from '../../src/contracts/sample.js';
import { MAX_SAMPLE_CARDS } from '../../src/contracts/worker-protocol.js';
import { type CardSampler, SamplerError } from './card-sampler.js';
import { HySampler } from './hy-sampler.js';
import { NvidiaSampler } from './nvidia-sampler.js';
import type { ToolEnv } from './run-tool.js';
import { isSimMigOption, parseSimMigOption, type SimMigInstance } from './sim-mig-layout.js';
import { SIM_MAX_CARDS, SimSampler } from './sim-sampler.js';

/** The `--gpus` values: probe, force a provider, N simulated cards, or N simulated cards in MIG mode. */
export type GpusOption = 'auto' | 'nvidia' | 'hy' | `sim:${number}` | `sim:${number}:mig=${string}`;

/** A parsed `--gpus` value; `mig` is the layout of every simulated card in MIG mode (ADR 0046). */
export type GpusChoice =
  | { kind: 'auto' | 'nvidia' | 'hy' }
  | { kind: 'sim'; count: number; mig?: SimMigInstance[] };

/** Cards simulated when `auto` finds no real ones: 8, so the whole 1/2/4/8 qualification ladder runs. */
export const AUTO_SIM_CARD_COUNT = 8;

/** Env var naming a sim state file (`SimStateSchema`) when `simStatePath` is not given. */
export const SIM_STATE_ENV = 'GPU_BROKER_SIM_STATE';

/**
 * Parses a `--gpus` value; throws `RangeError` saying what is accepted, or `INVALID_INPUT` (with the
 * reason and a hint) for a `sim:N:mig=<layout>` that no real card could have.
 */
export function parseGpusOption(value: string): GpusChoice {
  if (value === 'auto' || value === 'nvidia' || value === 'hy') return { kind: value };
  if (isSimMigOption(value)) {
    const parsed = parseSimMigOption(value);
    const perCard = 1 + parsed.layout.length;
    if (parsed.count * perCard > MAX_SAMPLE_CARDS)
      throw new RangeError(
        `--gpus ${value.slice(0, 80)}: ${parsed.count} cards with ${parsed.layout.length} slices each are ${parsed.count * perCard} cards; a worker reports at most ${MAX_SAMPLE_CARDS} (use sim:${Math.floor(MAX_SAMPLE_CARDS / perCard)} or fewer)`,
      );
    return { kind: 'sim', count: parsed.count, mig: parsed.layout };
  }
  const sim = /^sim:(\d{1,3})$/.exec(value);
  const count = sim?.[1] ? Number(sim[1]) : Number.NaN;
  if (count >= 1 && count <= SIM_MAX_CARDS) return { kind: 'sim', count };
  throw new RangeError(
    `--gpus must be auto, nvidia, hy, sim:N or sim:N:mig=<layout> with N in 1..${SIM_MAX_CARDS}; got "${value}"`,
  );
}

/** What `selectSampler` needs; every path and the environment can be overridden for tests. */
export interface SelectSamplerOptions {
  /** `auto`, `nvidia`, `hy` or `sim:N` (a plain string from the command line is validated). */
  gpus: GpusOption | string;
  /** Environment for PATH lookup and the tools (default `process.env`). */
  env?: ToolEnv;
  /** nvidia-smi to run instead of the one on PATH. */
  nvidiaSmiPath?: string;
  /** hy-smi to run instead of the one on PATH. */
  hySmiPath?: string;
  /** Per-call tool timeout (default 10 s). */
  timeoutMs?: number;
  /** Host name for hy card uuids and the default sim seed (default `os.hostname()`). */
  hostname?: string;
  /** Seed of sim card uuids; pass the worker id so two workers on one host differ. */
  simSeed?: string;
  /** Sim state file; default `env.GPU_BROKER_SIM_STATE`. */
  simStatePath?: string;
  /** Cards simulated when `auto` falls back (default `AUTO_SIM_CARD_COUNT`). */
  autoSimCount?: number;
}

/** The chosen sampler and why, for `gpu-broker start` / `worker` to print. */
export interface SamplerChoice {
  sampler: CardSampler;
  provider: Provider;
  simulated: boolean;
  /** Why this one: what was requested, or what each probe found. */
  reason: string;
  /** One line for people, e.g. `real cards: nvidia (8 cards)` or `SIMULATED cards: no nvidia-smi/hy-smi found`. */
  summary: string;
}

/**
 * Picks the card sampler. An explicit `nvidia` or `hy` is returned without probing: if the tool then
 * fails, the worker reports `sampler_error` rather than quietly simulating. `auto` tries nvidia-smi,
 * then hy-smi — a provider is taken when one sample succeeds with at least one card — and falls back to
 * simulated cards, saying why.
 */
export async function selectSampler(options: SelectSamplerOptions): Promise<SamplerChoice> {
  const choice = parseGpusOption(options.gpus);
  const env = options.env ?? process.env;
  const hostname = options.hostname ?? osHostname();
  const tool = { env, ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}) };
  const nvidia = () =>
    new NvidiaSampler({
      ...tool,
      ...(options.nvidiaSmiPath ? { nvidiaSmiPath: options.nvidiaSmiPath } : {}),
    });
  const hy = () =>
    new HySampler({ ...tool, hostname, ...(options.hySmiPath ? { hySmiPath: options.hySmiPath } : {}) });
  const sim = (count: number, mig?: SimMigInstance[]) => {
    const statePath = options.simStatePath ?? env[SIM_STATE_ENV];
    return new SimSampler({
      count,
      seed: options.simSeed ?? `sim-${hostname}`,
      ...(statePath ? { statePath } : {}),
      ...(mig ? { mig } : {}),
    });
  };

  switch (choice.kind) {
    case 'nvidia':
      return real(nvidia(), 'requested with --gpus nvidia', 'real cards: nvidia (requested)');
    case 'hy':
      return real(hy(), 'requested with --gpus hy', 'real cards: hy (requested)');
    case 'sim': {
      if (!choice.mig)
        return simulated(sim(choice.count), `requested with --gpus sim:${choice.count}`, 'requested');
      const layout = choice.mig.map((i) => i.profile).join('+');
      const slices = choice.count * choice.mig.length;
      return simulated(
        sim(choice.count, choice.mig),
        `requested with --gpus sim:${choice.count}:mig=${layout}`,
        `requested, in MIG mode (${layout} on each card: ${slices} SIMULATED slice${slices === 1 ? '' : 's'})`,
      );
    }
    case 'auto':
      break;
  }

  const findings: string[] = [];
  let anyFound = false;
  for (const [name, candidate] of [
    ['nvidia-smi', nvidia()],
    ['hy-smi', hy()],
  ] as const) {
    try {
      const cards = await candidate.sample();
      anyFound = true;
      if (cards.length > 0) {
        const count = `${cards.length} card${cards.length === 1 ? '' : 's'}`;
        return real(
          candidate,
          `${name} answered with ${count}`,
          `real cards: ${candidate.provider} (${count})`,
        );
      }
      findings.push(`${name} found no cards`);
    } catch (error) {
      if (!(error instanceof SamplerError)) throw error;
      if (error.code !== 'TOOL_NOT_FOUND') anyFound = true;
      findings.push(error.message);
    }
  }
  const why = anyFound ? findings.join('; ') : 'no nvidia-smi/hy-smi found';
  return simulated(sim(options.autoSimCount ?? AUTO_SIM_CARD_COUNT), findings.join('; '), why);
}

function real(sampler: CardSampler, reason: string, summary: string): SamplerChoice {
  return { sampler, provider: sampler.provider, simulated: false, reason, summary };
}

function simulated(sampler: SimSampler, reason: string, why: string): SamplerChoice {
  return { sampler, provider: 'sim', simulated: true, reason, summary: `SIMULATED cards: ${why}` };
}
