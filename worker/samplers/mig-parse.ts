import { clip, isUnmeasured, parseIndex } from './smi-values.js';

/**
 * Pure parsers for what the MIG tools print (formats in docs/decisions/0046-mig-slices-as-cards.md, "Sources"; golden
 * samples in test/unit/worker/samplers/mig-parse.test.ts). Tables are read by splitting on whitespace and
 * on the `|` cell borders, never by column offsets: the widths differ across drivers. A line that is not
 * understood is returned as a `MigProblem` beside whatever did parse, never thrown and never guessed
 * at: the join (`mig-slices.ts`) decides what a problem costs.
 */

/** Which output a problem came from. */
export type MigSource =
  | 'nvidia-smi -L'
  | 'nvidia-smi mig -lgi'
  | 'nvidia-smi mig -lci'
  | 'nvidia-smi --query-gpu=index,uuid,mig.mode.current'
  | 'nvidia-smi (MIG devices table)'
  | '/proc/driver/nvidia-caps/mig-minors'
  | 'capability access file'
  | 'join';

/**
 * What went wrong:
 * - `UNPARSED_LINE`: a line that is neither data, a header nor a border.
 * - `BAD_VALUE`: a data line with a field that is not what it must be (an index that is no number).
 * - `NO_PARENT`: a MIG line before any `GPU N:` line, or an instance of a card not in the list.
 * - `NO_GPU_INSTANCE`: a compute instance whose GPU instance is not listed.
 * - `UNMAPPED_DEVICE`: a MIG device whose GPU/compute instance cannot be told (no MIG devices table).
 * - `NO_DEVICE`: a compute instance with no MIG device (no `MIG-` UUID to bind).
 * - `NO_MINOR`: a capability minor missing for an instance.
 * - `UNKNOWN_PROFILE`: a profile the card's model does not have, or a name that is not a profile.
 * - `NO_MEMORY`: no memory figure for an instance (neither printed nor in the model's table).
 * - `DUPLICATE`: the same card, instance or device twice.
 * - `MODE_UNKNOWN`: a MIG mode that is neither Enabled nor Disabled nor "not supported".
 */
export type MigProblemCode =
  | 'UNPARSED_LINE'
  | 'BAD_VALUE'
  | 'NO_PARENT'
  | 'NO_GPU_INSTANCE'
  | 'UNMAPPED_DEVICE'
  | 'NO_DEVICE'
  | 'NO_MINOR'
  | 'UNKNOWN_PROFILE'
  | 'NO_MEMORY'
  | 'DUPLICATE'
  | 'MODE_UNKNOWN';

/** One thing that could not be read; `line` is the offending text (clipped) when there is one. */
export interface MigProblem {
  code: MigProblemCode;
  source: MigSource;
  message: string;
  line?: string;
}

/** Parsed rows and the problems met on the way. */
export interface Parsed<T> {
  rows: T[];
  problems: MigProblem[];
}

function problem(code: MigProblemCode, source: MigSource, message: string, line?: string): MigProblem {
  return line === undefined
    ? { code, source, message }
    : { code, source, message, line: clip(line.trim(), 200) };
}

function lines(text: string): string[] {
  return text.split(/\r?\n/).filter((line) => line.trim() !== '');
}

/** Cells of a `| a | b |` table line, trimmed, without the outer borders. */
function cells(line: string): string[] {
  const trimmed = line.trim().replace(/^\|/, '').replace(/\|$/, '');
  return trimmed.split('|').map((cell) => cell.trim());
}

function words(text: string): string[] {
  return text
    .trim()
    .split(/\s+/)
    .filter((word) => word !== '');
}

/** A border (`+----+`, `|=====|`) or an empty table line. */
function isRule(line: string): boolean {
  return /^[\s|+=-]*$/.test(line);
}

/** `Start:Size` of a placement, or null. */
function parsePlacement(raw: string): { start: number; size: number } | null {
  const match = /^(\d{1,2}):(\d{1,2})$/.exec(raw);
  return match?.[1] && match[2] ? { start: Number(match[1]), size: Number(match[2]) } : null;
}

// ---------------------------------------------------------------------------------------------------
// nvidia-smi -L

/** A `GPU N: NAME (UUID: GPU-…)` line. */
export interface ListedGpu {
  index: number;
  name: string;
  uuid: string;
}

/**
 * A `MIG <profile> Device <n>: (UUID: …)` line under a GPU. `uuid` is what `CUDA_VISIBLE_DEVICES` takes:
 * `MIG-<uuid>` on current drivers, `MIG-GPU-<gpu-uuid>/<gi>/<ci>` on R450, whose GI and CI are then known
 * from the UUID itself (`legacy`).
 */
export interface ListedMigDevice {
  gpu_index: number;
  /** Position of the device under its GPU (`Device 0`, `Device 1`, …). */
  device: number;
  profile: string;
  uuid: string;
  legacy: { gpu_uuid: string; gpu_instance: number; compute_instance: number } | null;
}

/** What `nvidia-smi -L` lists. */
export interface NvidiaList {
  gpus: ListedGpu[];
  migDevices: ListedMigDevice[];
}

const LIST: MigSource = 'nvidia-smi -L';

/** The UUID inside `(UUID: X)` at the end of a line, or null. */
function uuidAtEnd(line: string): string | null {
  const match = /\(UUID:\s*([^\s()]+)\)\s*$/.exec(line);
  return match?.[1] ?? null;
}

/** Parses `nvidia-smi -L`, both the current and the R450 MIG line formats. */
export function parseNvidiaList(text: string): NvidiaList & { problems: MigProblem[] } {
  const gpus: ListedGpu[] = [];
  const migDevices: ListedMigDevice[] = [];
  const problems: MigProblem[] = [];
  let current: ListedGpu | null = null;
  for (const line of lines(text)) {
    const tokens = words(line);
    const uuid = uuidAtEnd(line);
    if (tokens[0] === 'GPU') {
      const index = parseIndex((tokens[1] ?? '').replace(/:$/, ''));
      const name = line.replace(/^\s*GPU\s+\d+:\s*/, '').replace(/\s*\(UUID:[^)]*\)\s*$/, '');
      if (index === null || !tokens[1]?.endsWith(':') || !uuid?.startsWith('GPU-')) {
        problems.push(problem('BAD_VALUE', LIST, 'a GPU line without an index or a GPU- uuid', line));
        current = null;
        continue;
      }
      if (gpus.some((gpu) => gpu.index === index)) {
        problems.push(problem('DUPLICATE', LIST, `GPU ${index} listed twice`, line));
      }
      current = { index, name: clip(name, 128), uuid: clip(uuid, 128) };
      gpus.push(current);
      continue;
    }
    if (tokens[0] === 'MIG') {
      const device = tokens[2] === 'Device' ? parseIndex((tokens[3] ?? '').replace(/:$/, '')) : null;
      const profile = tokens[1] ?? '';
      if (device === null || !uuid?.startsWith('MIG-') || profile === '') {
        problems.push(
          problem('BAD_VALUE', LIST, 'a MIG line without a profile, device number or MIG- uuid', line),
        );
        continue;
      }
      if (current === null) {
        problems.push(problem('NO_PARENT', LIST, 'a MIG device before any GPU line', line));
        continue;
      }
      const legacyMatch = /^MIG-(GPU-[0-9a-fA-F-]+)\/(\d+)\/(\d+)$/.exec(uuid);
      const legacy =
        legacyMatch?.[1] && legacyMatch[2] && legacyMatch[3]
          ? {
              gpu_uuid: legacyMatch[1],
              gpu_instance: Number(legacyMatch[2]),
              compute_instance: Number(legacyMatch[3]),
            }
          : null;
      if (uuid.startsWith('MIG-GPU-') && legacy === null) {
        problems.push(problem('BAD_VALUE', LIST, 'an R450 MIG uuid without /<gi>/<ci>', line));
        continue;
      }
      migDevices.push({ gpu_index: current.index, device, profile, uuid: clip(uuid, 128), legacy });
      continue;
    }
    problems.push(problem('UNPARSED_LINE', LIST, 'neither a GPU nor a MIG line', line));
  }
  return { gpus, migDevices, problems };
}

// ---------------------------------------------------------------------------------------------------
// nvidia-smi mig -lgi / -lci

/** One row of `nvidia-smi mig -lgi`. */
export interface GpuInstanceRow {
  gpu_index: number;
  profile: string;
  profile_id: number;
  gpu_instance: number;
  placement: { start: number; size: number };
}

/** One row of `nvidia-smi mig -lci`. */
export interface ComputeInstanceRow {
  gpu_index: number;
  gpu_instance: number;
  profile: string;
  profile_id: number;
  compute_instance: number;
  placement: { start: number; size: number };
}

/** Messages the mig listings print instead of a table when there is nothing to list. */
const NOTHING_TO_LIST = /no (gpu|compute) instances? found|no mig-enabled devices found/i;

/**
 * The rows of a `nvidia-smi mig -l…` table: data rows are those with a `MIG` word; a line starting with a
 * number but without one, or anything else that is not a header or border, is a problem.
 */
function migTableRows(
  text: string,
  source: MigSource,
  fields: number,
  read: (tokens: string[]) => string | null,
): MigProblem[] {
  const problems: MigProblem[] = [];
  for (const line of lines(text)) {
    if (isRule(line) || NOTHING_TO_LIST.test(line)) continue;
    const tokens = words(cells(line).join(' '));
    if (!tokens.includes('MIG')) {
      if (/^\d/.test(tokens[0] ?? ''))
        problems.push(problem('UNPARSED_LINE', source, 'a row without MIG <profile>', line));
      else if (!/GPU|Name|Profile|Instance|instances:|ID|Placement|Start:Size/.test(line)) {
        problems.push(problem('UNPARSED_LINE', source, 'neither a row, a header nor a border', line));
      }
      continue;
    }
    if (tokens.length !== fields) {
      problems.push(problem('BAD_VALUE', source, `expected ${fields} fields, got ${tokens.length}`, line));
      continue;
    }
    const why = read(tokens);
    if (why !== null) problems.push(problem('BAD_VALUE', source, why, line));
  }
  return problems;
}

/** Parses `nvidia-smi mig -lgi` (the 57- and 54-column variants alike). */
export function parseGpuInstances(text: string): Parsed<GpuInstanceRow> {
  const rows: GpuInstanceRow[] = [];
  const problems = migTableRows(text, 'nvidia-smi mig -lgi', 6, (t) => {
    const [gpu, mig, profile, profileId, instance, place] = t as [
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    const gpuIndex = parseIndex(gpu);
    const id = parseIndex(profileId);
    const gi = parseIndex(instance);
    const placement = parsePlacement(place);
    if (mig !== 'MIG' || gpuIndex === null || id === null || gi === null || placement === null) {
      return 'GPU, Name, Profile ID, Instance ID and Start:Size not where a -lgi row has them';
    }
    if (rows.some((row) => row.gpu_index === gpuIndex && row.gpu_instance === gi))
      return `GPU instance ${gi} twice`;
    rows.push({ gpu_index: gpuIndex, profile, profile_id: id, gpu_instance: gi, placement });
    return null;
  });
  return { rows, problems };
}

/** Parses `nvidia-smi mig -lci` (the second column is the GPU-instance ID). */
export function parseComputeInstances(text: string): Parsed<ComputeInstanceRow> {
  const rows: ComputeInstanceRow[] = [];
  const problems = migTableRows(text, 'nvidia-smi mig -lci', 7, (t) => {
    const [gpu, giRaw, mig, profile, profileId, instance, place] = t as [
      string,
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    const gpuIndex = parseIndex(gpu);
    const gi = parseIndex(giRaw);
    const id = parseIndex(profileId);
    const ci = parseIndex(instance);
    const placement = parsePlacement(place);
    if (
      mig !== 'MIG' ||
      gpuIndex === null ||
      gi === null ||
      id === null ||
      ci === null ||
      placement === null
    ) {
      return 'GPU, GPU instance, Name, Profile ID, Instance ID and Start:Size not where a -lci row has them';
    }
    if (rows.some((r) => r.gpu_index === gpuIndex && r.gpu_instance === gi && r.compute_instance === ci)) {
      return `compute instance ${gi}/${ci} twice`;
    }
    rows.push({
      gpu_index: gpuIndex,
      gpu_instance: gi,
      profile,
      profile_id: id,
      compute_instance: ci,
      placement,
    });
    return null;
  });
  return { rows, problems };
}

// ---------------------------------------------------------------------------------------------------
// --query-gpu=index,uuid,mig.mode.current

/** MIG mode of one card: `null` when the card has none (`[N/A]`, `[Not Supported]`). */
export interface MigModeRow {
  index: number;
  uuid: string;
  mode: 'enabled' | 'disabled' | null;
}

const MODE: MigSource = 'nvidia-smi --query-gpu=index,uuid,mig.mode.current';

/** Parses `--query-gpu=index,uuid,mig.mode.current --format=csv[,noheader]` (a header line is skipped). */
export function parseMigModeCsv(text: string): Parsed<MigModeRow> {
  const rows: MigModeRow[] = [];
  const problems: MigProblem[] = [];
  for (const line of lines(text)) {
    const parts = line.split(',').map((part) => part.trim());
    if (parts[0] === 'index') continue;
    const index = parseIndex(parts[0] ?? '');
    const uuid = parts[1] ?? '';
    const raw = parts[2] ?? '';
    if (parts.length !== 3 || index === null || !uuid.startsWith('GPU-')) {
      problems.push(problem('BAD_VALUE', MODE, 'expected index, GPU- uuid, mode', line));
      continue;
    }
    const lower = raw.toLowerCase();
    let mode: MigModeRow['mode'];
    if (lower === 'enabled') mode = 'enabled';
    else if (lower === 'disabled') mode = 'disabled';
    else if (isUnmeasured(raw)) mode = null;
    else {
      problems.push(problem('MODE_UNKNOWN', MODE, `MIG mode "${clip(raw, 40)}"`, line));
      continue;
    }
    if (rows.some((row) => row.index === index)) {
      problems.push(problem('DUPLICATE', MODE, `GPU ${index} twice`, line));
      continue;
    }
    rows.push({ index, uuid: clip(uuid, 128), mode });
  }
  return { rows, problems };
}

// ---------------------------------------------------------------------------------------------------
// nvidia-smi (the MIG devices table of the default output)

/** One row of the `MIG devices:` table: which GI/CI a device number is, and its memory. */
export interface MigDeviceRow {
  gpu_index: number;
  gpu_instance: number;
  compute_instance: number;
  device: number;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
}

const DEVICES: MigSource = 'nvidia-smi (MIG devices table)';

/**
 * Parses the `MIG devices:` section of plain `nvidia-smi` (other sections are ignored). It is the one
 * output that says which GPU/compute instance a current-format `MIG-<uuid>` device number is, and it
 * prints each instance's memory (`11MiB / 20096MiB`).
 */
export function parseMigDevicesTable(text: string): Parsed<MigDeviceRow> {
  const rows: MigDeviceRow[] = [];
  const problems: MigProblem[] = [];
  let inSection = false;
  for (const line of lines(text)) {
    if (/MIG devices:/.test(line)) {
      inSection = true;
      continue;
    }
    if (!inSection) continue;
    if (/Processes:/.test(line)) break;
    if (isRule(line) || /No MIG devices found/i.test(line)) continue;
    const [first = '', memory = ''] = cells(line);
    const ids = words(first);
    if (ids.length === 0) continue; // continuation line (BAR1, ECC)
    if (ids.includes('GPU') || ids.includes('ID')) continue; // header
    const [gpu, gi, ci, dev] = ids.map((id) => parseIndex(id));
    if (ids.length !== 4 || gpu == null || gi == null || ci == null || dev == null) {
      problems.push(problem('UNPARSED_LINE', DEVICES, 'expected GPU, GI, CI and MIG Dev numbers', line));
      continue;
    }
    const usage = /^(\d+)\s*MiB\s*\/\s*(\d+)\s*MiB$/.exec(memory);
    if (!usage && !isUnmeasured(memory.split('/')[0] ?? '')) {
      problems.push(problem('BAD_VALUE', DEVICES, 'memory is not "<used>MiB / <total>MiB"', line));
    }
    if (rows.some((row) => row.gpu_index === gpu && row.device === dev)) {
      problems.push(problem('DUPLICATE', DEVICES, `MIG device ${gpu}/${dev} twice`, line));
      continue;
    }
    rows.push({
      gpu_index: gpu,
      gpu_instance: gi,
      compute_instance: ci,
      device: dev,
      memory_used_mib: usage?.[1] ? Number(usage[1]) : null,
      memory_total_mib: usage?.[2] ? Number(usage[2]) : null,
    });
  }
  return { rows, problems };
}

// ---------------------------------------------------------------------------------------------------
// /proc/driver/nvidia-caps/mig-minors and the capability access files

/** Capability minors by name (`gpu0/gi2/access`, `gpu0/gi2/ci0/access`, `config`, `monitor`). */
export type MigMinors = Map<string, number>;

const MINORS: MigSource = '/proc/driver/nvidia-caps/mig-minors';

/** Parses `/proc/driver/nvidia-caps/mig-minors` (`<name> <minor>` per line). */
export function parseMigMinors(text: string): { minors: MigMinors; problems: MigProblem[] } {
  const minors: MigMinors = new Map();
  const problems: MigProblem[] = [];
  for (const line of lines(text)) {
    const tokens = words(line);
    const minor = parseIndex(tokens[1] ?? '');
    const name = tokens[0] ?? '';
    if (tokens.length !== 2 || minor === null || !/^[a-z][a-z0-9/_-]*$/.test(name)) {
      problems.push(problem('UNPARSED_LINE', MINORS, 'expected "<name> <minor>"', line));
      continue;
    }
    if (minors.has(name)) {
      problems.push(problem('DUPLICATE', MINORS, `${name} twice`, line));
      continue;
    }
    minors.set(name, minor);
  }
  return { minors, problems };
}

/** The key of a GPU instance's (ci absent) or compute instance's access capability in `MigMinors`. */
export function migMinorKey(gpuMinor: number, gpuInstance: number, computeInstance?: number): string {
  return computeInstance === undefined
    ? `gpu${gpuMinor}/gi${gpuInstance}/access`
    : `gpu${gpuMinor}/gi${gpuInstance}/ci${computeInstance}/access`;
}

/**
 * The minor in a capability `access` file (`/proc/driver/nvidia/capabilities/gpu0/mig/gi2/ci0/access`:
 * `DeviceFileMinor: 22` among other `Key: value` lines), or a problem.
 */
export function parseCapabilityAccess(text: string): { minor: number } | { problem: MigProblem } {
  for (const line of lines(text)) {
    const match = /^\s*DeviceFileMinor:\s*(\S+)\s*$/.exec(line);
    if (!match) continue;
    const minor = parseIndex(match[1] ?? '');
    if (minor !== null) return { minor };
    return {
      problem: problem('BAD_VALUE', 'capability access file', 'DeviceFileMinor is not a number', line),
    };
  }
  return { problem: problem('UNPARSED_LINE', 'capability access file', 'no DeviceFileMinor line') };
}
