import type { CardHealth, CardProcess, CardSample } from '../../src/contracts/sample.js';
import { SamplerError } from './card-sampler.js';
import { clip, isUnmeasured, parseFlag, parseIndex, parseNumber } from './smi-values.js';

/**
 * Pure parsers for `nvidia-smi --query-* --format=csv,noheader,nounits` output (the formats of the literal
 * samples in test/unit/worker/samplers/nvidia-parse.test.ts). No I/O here, so tests feed them that text.
 */

/** Fields every driver answers; queried together because one unsupported field fails the whole list. */
export const NVIDIA_CORE_FIELDS = [
  'index',
  'uuid',
  'name',
  'memory.total',
  'memory.used',
  'utilization.gpu',
  'temperature.gpu',
  'power.draw',
] as const;

/**
 * Health fields read when the driver knows them, in a separate call (older drivers reject some).
 * Deliberately left out: PCIe width (drops at idle on some boards) and clock-event masks (name changed
 * across drivers); add them here with a rule in `nvidiaHealth` when they are worth it.
 */
export const NVIDIA_HEALTH_FIELDS = [
  'ecc.errors.uncorrected.volatile.total',
  'remapped_rows.pending',
  'remapped_rows.failure',
  'retired_pages.pending',
] as const;

/** One optional health field. */
export type NvidiaHealthField = (typeof NVIDIA_HEALTH_FIELDS)[number];

/** Raw health values of one card, by field; a field that was not queried is absent. */
export type NvidiaHealthReadings = Partial<Record<NvidiaHealthField, string>>;

/** Fields of `--query-compute-apps`, in order. */
export const NVIDIA_APP_FIELDS = ['gpu_uuid', 'pid', 'process_name', 'used_memory'] as const;

/** A compute process and the card (by uuid) it runs on. */
export interface NvidiaApp {
  gpu_uuid: string;
  process: CardProcess;
}

function parseFailed(message: string, line: string): SamplerError {
  return new SamplerError(
    'PARSE_FAILED',
    `nvidia-smi output not understood: ${message}: "${clip(line, 200)}"`,
    {
      tool: 'nvidia-smi',
      output: clip(line, 200),
    },
  );
}

/**
 * Splits one csv row into `expected` trimmed fields. nvidia-smi does not quote, so a comma inside the
 * one free-text field (a card or process name) yields extra fields: they are joined back into the field
 * at `freeTextIndex`. Null when the row has too few fields.
 */
export function splitCsvRow(line: string, expected: number, freeTextIndex: number): string[] | null {
  const parts = line.split(',');
  if (parts.length < expected) return null;
  const extra = parts.length - expected;
  const joined = [
    ...parts.slice(0, freeTextIndex),
    parts.slice(freeTextIndex, freeTextIndex + extra + 1).join(','),
    ...parts.slice(freeTextIndex + extra + 1),
  ];
  return joined.map((part) => part.trim());
}

function dataLines(text: string): string[] {
  return text.split(/\r?\n/).filter((line) => line.trim() !== '');
}

/**
 * Cards from the core query (`NVIDIA_CORE_FIELDS`). Health starts `unknown` and processes empty; the
 * sampler fills both from the other queries. Throws `PARSE_FAILED` on a row without index or uuid.
 */
export function parseNvidiaCoreCsv(text: string): CardSample[] {
  return dataLines(text).map((line) => {
    const fields = splitCsvRow(line, NVIDIA_CORE_FIELDS.length, 2);
    if (!fields) throw parseFailed(`expected ${NVIDIA_CORE_FIELDS.length} fields`, line);
    const [index, uuid, name, total, used, util, temp, power] = fields as [
      string,
      string,
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    const cardIndex = parseIndex(index);
    if (cardIndex === null || cardIndex > 255) throw parseFailed('bad index', line);
    if (isUnmeasured(uuid)) throw parseFailed('no uuid', line);
    return {
      index: cardIndex,
      uuid: clip(uuid, 128),
      model: clip(name, 128),
      memory_used_mib: parseNumber(used),
      memory_total_mib: parseNumber(total),
      utilization_pct: parseNumber(util),
      temperature_c: parseNumber(temp),
      power_w: parseNumber(power),
      health: 'unknown',
      health_reasons: [],
      processes: [],
      simulated: false,
    };
  });
}

/**
 * Health readings from `--query-gpu=uuid,<fields>`, keyed by card uuid. Throws `PARSE_FAILED` on a row
 * with the wrong number of fields (no free-text field here, so the count is exact).
 */
export function parseNvidiaHealthCsv(
  text: string,
  fields: readonly NvidiaHealthField[],
): Map<string, NvidiaHealthReadings> {
  const byUuid = new Map<string, NvidiaHealthReadings>();
  for (const line of dataLines(text)) {
    const parts = line.split(',').map((part) => part.trim());
    if (parts.length !== fields.length + 1) throw parseFailed(`expected ${fields.length + 1} fields`, line);
    const readings: NvidiaHealthReadings = {};
    fields.forEach((field, i) => {
      readings[field] = parts[i + 1] ?? '';
    });
    byUuid.set(parts[0] ?? '', readings);
  }
  return byUuid;
}

/** Card health and the reasons behind it, from whatever health fields were measured. */
export interface HealthVerdict {
  health: CardHealth;
  health_reasons: string[];
}

/**
 * Health rules (NVIDIA's memory-error guidance): a failed row remap means the card needs service →
 * `failed`; uncorrected ECC errors since boot, pending remaps or pending page retirements need a reset
 * → `degraded`. Nothing measured at all → `unknown` (not failing: an old driver is not a sick card).
 */
export function nvidiaHealth(readings: NvidiaHealthReadings): HealthVerdict {
  const reasons: string[] = [];
  let failed = false;
  let measured = 0;
  const flag = (field: NvidiaHealthField): boolean | null => {
    const raw = readings[field];
    const value = raw === undefined ? null : parseFlag(raw);
    if (value !== null) measured += 1;
    return value;
  };
  const eccRaw = readings['ecc.errors.uncorrected.volatile.total'];
  const ecc = eccRaw === undefined ? null : parseNumber(eccRaw);
  if (ecc !== null) measured += 1;
  if (flag('remapped_rows.failure')) {
    failed = true;
    reasons.push('remapped_rows.failure=yes: row remapping failed, the card needs service');
  }
  if (ecc !== null && ecc > 0) reasons.push(`ecc.uncorrected.volatile=${ecc}`);
  if (flag('remapped_rows.pending')) reasons.push('remapped_rows.pending=yes: a reset is needed');
  if (flag('retired_pages.pending')) reasons.push('retired_pages.pending=yes: a reset is needed');
  if (failed) return { health: 'failed', health_reasons: reasons };
  if (reasons.length > 0) return { health: 'degraded', health_reasons: reasons };
  if (measured === 0) return { health: 'unknown', health_reasons: ['no health field measured on this card'] };
  return { health: 'ok', health_reasons: [] };
}

/**
 * Processes from `--query-compute-apps=gpu_uuid,pid,process_name,used_memory`. Empty output means no
 * processes. Throws `PARSE_FAILED` on a row without a pid: dropping it would hide a foreign process.
 */
export function parseComputeAppsCsv(text: string): NvidiaApp[] {
  return dataLines(text)
    .filter((line) => !/^no running (compute )?processes found/i.test(line.trim()))
    .map((line) => {
      const fields = splitCsvRow(line, NVIDIA_APP_FIELDS.length, 2);
      if (!fields) throw parseFailed(`expected ${NVIDIA_APP_FIELDS.length} fields`, line);
      const [gpuUuid, pid, name, used] = fields as [string, string, string, string];
      const pidValue = parseIndex(pid);
      if (pidValue === null) throw parseFailed('bad pid', line);
      return {
        gpu_uuid: gpuUuid,
        process: { pid: pidValue, name: clip(name, 256), used_memory_mib: parseNumber(used) },
      };
    });
}

/**
 * The field an old driver refused (`Field "x" is not a valid field to query.`, printed on stdout with
 * exit 2), or null when the output is some other failure.
 */
export function rejectedField(output: string): string | null {
  const match = /Field\s+["“']([^"”']+)["”']\s+is not a valid field to query/i.exec(output);
  return match?.[1] ?? null;
}
