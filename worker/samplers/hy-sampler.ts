import { hostname as osHostname } from 'node:os';
import type { CardSample } from '../../src/contracts/sample.js';
import { type CardSampler, SamplerError } from './card-sampler.js';
import { hyMemory, hyModel, parseHyDetails, parseHyTable } from './hy-parse.js';
import { DEFAULT_TOOL_RUN, excerpt, locateTool, requireSuccess, runTool, type ToolEnv } from './run-tool.js';
import { clip } from './smi-values.js';

/** How to find and run hy-smi. */
export interface HySamplerOptions {
  /** Path of hy-smi; by default `hy-smi` is looked up on `env.PATH` at every sample. */
  hySmiPath?: string;
  /** Environment for PATH lookup and for the child (default `process.env`). */
  env?: ToolEnv;
  /** Kill one hy-smi call after this long (default 10 s). */
  timeoutMs?: number;
  /** Output cap per call (default 4 MiB). */
  maxBufferBytes?: number;
  /** Host name used in synthesized card uuids (default `os.hostname()`). */
  hostname?: string;
}

/** Model reported when hy-smi does not name the product. */
export const HY_DEFAULT_MODEL = 'Hygon DCU';

/** The uuid given to a Hygon card: the table has none, so it is `hy-<hostname>-<index>`. */
export function hyCardUuid(hostname: string, index: number): string {
  return clip(`hy-${hostname}-${index}`, 128);
}

/**
 * Samples Hygon DCUs with two hy-smi calls:
 * 1. the default table (temperature, power, VRAM %, utilization) — any failure fails the sample;
 * 2. `--showproductname --showmeminfo vram` for the model and VRAM in MiB — optional: when it fails,
 *    the model is `Hygon DCU` and memory is null (the table's VRAM % cannot be turned into MiB
 *    without a total, and a guess would be worse than unknown).
 *
 * Not read: health counters (health is `unknown`) and processes (hy-smi's pid listing does not say
 * which card a process uses), so on hy hosts foreign use shows only through VRAM.
 * The uuid is synthesized per host and index; it is stable as long as the device order is.
 */
export class HySampler implements CardSampler {
  /** Always `hy`. */
  readonly provider = 'hy' as const;
  private readonly options: HySamplerOptions;
  private readonly env: ToolEnv;
  private readonly hostname: string;

  /** Nothing runs until the first `sample()`. */
  constructor(options: HySamplerOptions = {}) {
    this.options = options;
    this.env = options.env ?? process.env;
    this.hostname = options.hostname ?? osHostname();
  }

  /** One sample of every card; throws `SamplerError` when the hy-smi table cannot be read. */
  async sample(): Promise<CardSample[]> {
    const file = await locateTool('hy-smi', this.options.hySmiPath, this.env);
    const run = (args: string[]) =>
      runTool(file, args, {
        timeoutMs: this.options.timeoutMs ?? DEFAULT_TOOL_RUN.timeoutMs,
        maxBufferBytes: this.options.maxBufferBytes ?? DEFAULT_TOOL_RUN.maxBufferBytes,
        env: this.env,
      });

    const rows = parseHyTable(requireSuccess(file, await run([])));

    let details = new Map<number, Map<string, string>>();
    let detailsError: string | null = null;
    try {
      details = parseHyDetails(
        requireSuccess(file, await run(['--showproductname', '--showmeminfo', 'vram'])),
      );
    } catch (error) {
      if (!(error instanceof SamplerError)) throw error;
      detailsError = excerpt(`memory query failed: ${error.message}`);
    }

    return rows.map((row) => {
      const card = details.get(row.index);
      const memory = hyMemory(card);
      const used =
        memory.memory_used_mib ??
        (row.vram_pct !== null && memory.memory_total_mib !== null
          ? Math.round((row.vram_pct * memory.memory_total_mib) / 100)
          : null);
      const reasons = ['hy-smi health counters are not read'];
      if (detailsError) reasons.push(detailsError);
      return {
        index: row.index,
        uuid: hyCardUuid(this.hostname, row.index),
        model: hyModel(card) ?? HY_DEFAULT_MODEL,
        memory_used_mib: used,
        memory_total_mib: memory.memory_total_mib,
        memory_used_pct: row.vram_pct,
        utilization_pct: row.utilization_pct,
        temperature_c: row.temperature_c,
        power_w: row.power_w,
        health: 'unknown',
        health_reasons: reasons,
        processes: [],
        simulated: false,
      };
    });
  }
}
