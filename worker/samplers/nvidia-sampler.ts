import type { CardSample } from '../../src/contracts/sample.js';
import { type CardSampler, SamplerError } from './card-sampler.js';
import {
  NVIDIA_APP_FIELDS,
  NVIDIA_CORE_FIELDS,
  NVIDIA_HEALTH_FIELDS,
  type NvidiaHealthField,
  type NvidiaHealthReadings,
  nvidiaHealth,
  parseComputeAppsCsv,
  parseNvidiaCoreCsv,
  parseNvidiaHealthCsv,
  rejectedField,
} from './nvidia-parse.js';
import {
  DEFAULT_TOOL_RUN,
  excerpt,
  locateTool,
  requireSuccess,
  runTool,
  type ToolEnv,
  toolFailure,
} from './run-tool.js';

/** How to find and run nvidia-smi. */
export interface NvidiaSamplerOptions {
  /** Path of nvidia-smi; by default `nvidia-smi` is looked up on `env.PATH` at every sample. */
  nvidiaSmiPath?: string;
  /** Environment for PATH lookup and for the child (default `process.env`). */
  env?: ToolEnv;
  /** Kill one nvidia-smi call after this long (default 10 s). */
  timeoutMs?: number;
  /** Output cap per call (default 4 MiB). */
  maxBufferBytes?: number;
}

const CSV_FORMAT = '--format=csv,noheader,nounits';

/**
 * Samples NVIDIA cards with three nvidia-smi calls, one after another (simple, and deterministic for the
 * fakes; each takes well under a second with persistence mode on):
 * 1. the core query — any failure fails the sample;
 * 2. the optional health query — a field the driver refuses is dropped for the rest of this sampler's
 *    life and the call retried without it; any other failure leaves health `unknown` with a reason;
 * 3. the compute apps, attached to cards by uuid — a failure fails the sample, since reporting no
 *    processes would make busy cards look free.
 */
export class NvidiaSampler implements CardSampler {
  /** Always `nvidia`. */
  readonly provider = 'nvidia' as const;
  private readonly options: NvidiaSamplerOptions;
  private readonly env: ToolEnv;
  private readonly refused = new Set<NvidiaHealthField>();

  /** Nothing runs until the first `sample()`. */
  constructor(options: NvidiaSamplerOptions = {}) {
    this.options = options;
    this.env = options.env ?? process.env;
  }

  /** Health fields this driver refused so far (they stay unmeasured). */
  get refusedHealthFields(): readonly NvidiaHealthField[] {
    return [...this.refused];
  }

  /** One sample of every card; throws `SamplerError` when nvidia-smi cannot be read. */
  async sample(): Promise<CardSample[]> {
    const file = await locateTool('nvidia-smi', this.options.nvidiaSmiPath, this.env);
    const run = (args: string[]) =>
      runTool(file, args, {
        timeoutMs: this.options.timeoutMs ?? DEFAULT_TOOL_RUN.timeoutMs,
        maxBufferBytes: this.options.maxBufferBytes ?? DEFAULT_TOOL_RUN.maxBufferBytes,
        env: this.env,
      });

    const core = requireSuccess(file, await run([`--query-gpu=${NVIDIA_CORE_FIELDS.join(',')}`, CSV_FORMAT]));
    const cards = parseNvidiaCoreCsv(core).sort((a, b) => a.index - b.index);

    let health: Map<string, NvidiaHealthReadings> | SamplerError;
    try {
      health = await this.readHealth(file, run);
    } catch (error) {
      if (!(error instanceof SamplerError)) throw error;
      health = error;
    }
    for (const card of cards) {
      const verdict =
        health instanceof SamplerError
          ? {
              health: 'unknown' as const,
              health_reasons: [excerpt(`health query failed: ${health.message}`)],
            }
          : nvidiaHealth(health.get(card.uuid) ?? {});
      card.health = verdict.health;
      card.health_reasons = verdict.health_reasons;
    }

    const apps = requireSuccess(
      file,
      await run([`--query-compute-apps=${NVIDIA_APP_FIELDS.join(',')}`, CSV_FORMAT]),
    );
    const byUuid = new Map(cards.map((card) => [card.uuid, card]));
    for (const app of parseComputeAppsCsv(apps)) {
      // A process on a card we did not list (e.g. hidden by the driver) cannot be attributed; skip it.
      byUuid.get(app.gpu_uuid)?.processes.push(app.process);
    }
    return cards;
  }

  private async readHealth(
    file: string,
    run: (args: string[]) => ReturnType<typeof runTool>,
  ): Promise<Map<string, NvidiaHealthReadings>> {
    // Bounded: every retry drops one field.
    for (;;) {
      const fields = NVIDIA_HEALTH_FIELDS.filter((field) => !this.refused.has(field));
      if (fields.length === 0) return new Map();
      const result = await run([`--query-gpu=uuid,${fields.join(',')}`, CSV_FORMAT]);
      if (result.exitCode === 0) return parseNvidiaHealthCsv(result.stdout, fields);
      const refused = rejectedField(`${result.stdout}\n${result.stderr}`);
      const known = fields.find((field) => field === refused);
      if (!known) throw toolFailure(file, result);
      this.refused.add(known);
    }
  }
}
