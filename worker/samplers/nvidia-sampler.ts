import { readFile } from 'node:fs/promises';
import type { CardSample } from '../../src/contracts/sample.js';
import { type CardSampler, SamplerError } from './card-sampler.js';
import { withMigSlices } from './mig-cards.js';
import {
  type MigMinors,
  type MigProblem,
  parseComputeInstances,
  parseGpuInstances,
  parseMigDevicesTable,
  parseMigMinors,
  parseMigModeCsv,
  parseNvidiaList,
} from './mig-parse.js';
import { joinMigSlices } from './mig-slices.js';
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
  /** The driver's capability minors of MIG instances (default `/proc/driver/nvidia-caps/mig-minors`). */
  migMinorsPath?: string;
}

/** Where the driver lists the capability minors of every possible MIG instance. */
export const MIG_MINORS_PATH = '/proc/driver/nvidia-caps/mig-minors';
/** The MIG mode query (ADR 0046); a driver that refuses the field has no MIG, and is not asked again. */
const MIG_MODE_FIELDS = 'index,uuid,mig.mode.current';

const CSV_FORMAT = '--format=csv,noheader,nounits';

/** A MIG listing nvidia-smi printed but we cannot read: the sample fails, naming the first problems. */
function migParseFailed(file: string, problems: readonly MigProblem[]): SamplerError {
  const text = problems
    .slice(0, 3)
    .map((p) => `${p.source}: ${p.message}${p.line ? ` ("${p.line}")` : ''}`)
    .join('; ');
  return new SamplerError('PARSE_FAILED', excerpt(`cannot read the MIG layout: ${text}`), { tool: file });
}

/**
 * Samples NVIDIA cards with three nvidia-smi calls (four, and five more where a card is in MIG mode), one after another (simple, and deterministic for the
 * fakes; each takes well under a second with persistence mode on):
 * 1. the core query — any failure fails the sample;
 * 2. the optional health query — a field the driver refuses is dropped for the rest of this sampler's
 *    life and the call retried without it; any other failure leaves health `unknown` with a reason;
 * 3. the compute apps, attached to cards by uuid — a failure fails the sample, since reporting no
 *    processes would make busy cards look free;
 * 4. MIG mode, and the slices of cards in MIG mode (`readMig`).
 */
export class NvidiaSampler implements CardSampler {
  /** Always `nvidia`. */
  readonly provider = 'nvidia' as const;
  private readonly options: NvidiaSamplerOptions;
  private readonly env: ToolEnv;
  private readonly refused = new Set<NvidiaHealthField>();
  /** The driver refused `mig.mode.current` once: it has no MIG, so the query is not repeated. */
  private migUnsupported = false;

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
      // On a card in MIG mode the driver names the parent: the process shows there, not on its slice.
      byUuid.get(app.gpu_uuid)?.processes.push(app.process);
    }
    return this.readMig(file, run, cards);
  }

  /**
   * 4. MIG (docs/decisions/0046-mig-slices-as-cards.md): the mode of every card; only where one is in MIG
   * mode, `-L`, `mig -lgi`, `mig -lci`, the default table (MIG devices) and the capability minors, joined
   * into slices appended after the cards. A listing that fails, or a join that loses a card's slices,
   * fails the sample (its cards UNKNOWN) rather than report a MIG card without them.
   */
  private async readMig(
    file: string,
    run: (args: string[]) => ReturnType<typeof runTool>,
    cards: CardSample[],
  ): Promise<CardSample[]> {
    if (this.migUnsupported) return cards;
    const result = await run([`--query-gpu=${MIG_MODE_FIELDS}`, '--format=csv,noheader']);
    if (result.exitCode !== 0 && rejectedField(`${result.stdout}\n${result.stderr}`) === 'mig.mode.current') {
      this.migUnsupported = true;
      return cards;
    }
    const modes = parseMigModeCsv(requireSuccess(file, result));
    if (modes.problems.length > 0) throw migParseFailed(file, modes.problems);
    if (!modes.rows.some((row) => row.mode === 'enabled')) return cards;

    const list = parseNvidiaList(requireSuccess(file, await run(['-L'])));
    const gpuInstances = parseGpuInstances(requireSuccess(file, await run(['mig', '-lgi'])));
    const computeInstances = parseComputeInstances(requireSuccess(file, await run(['mig', '-lci'])));
    const devices = parseMigDevicesTable(requireSuccess(file, await run([])));
    const lost = [...list.problems, ...gpuInstances.problems, ...computeInstances.problems];
    if (lost.length > 0) throw migParseFailed(file, lost);
    const minors = await this.readMinors();
    const join = joinMigSlices({
      list,
      modes: modes.rows,
      gpuInstances: gpuInstances.rows,
      computeInstances: computeInstances.rows,
      devices: devices.rows,
      minors: minors.minors,
      memoryTotalMib: new Map(cards.map((card) => [card.index, card.memory_total_mib])),
    });
    // A compute instance the join could not attach to its card is a slice lost: fail the sample.
    const cardLost = join.problems.filter(
      (p) =>
        ['NO_PARENT', 'NO_GPU_INSTANCE', 'BAD_VALUE', 'UNKNOWN_PROFILE', 'DUPLICATE'].includes(p.code) &&
        !join.slices.some((slice) =>
          p.message.startsWith(
            `GPU ${slice.parent_index} instance ${slice.gpu_instance}/${slice.compute_instance}:`,
          ),
        ),
    );
    if (cardLost.length > 0) throw migParseFailed(file, cardLost);
    const problems = [...join.problems, ...devices.problems, ...minors.problems];
    return withMigSlices(cards, { ...join, problems });
  }

  /** The capability minors; an unreadable file leaves every slice's minors unknown (never granted). */
  private async readMinors(): Promise<{ minors: MigMinors | null; problems: MigProblem[] }> {
    const path = this.options.migMinorsPath ?? MIG_MINORS_PATH;
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (error) {
      return {
        minors: null,
        problems: [
          {
            code: 'NO_MINOR',
            source: '/proc/driver/nvidia-caps/mig-minors',
            message: `${path}: ${String(error)}`,
          },
        ],
      };
    }
    return parseMigMinors(text);
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
