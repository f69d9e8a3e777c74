/**
 * Parsers for the one-line forms of `scontrol show job -d -o` and `scontrol show node -d -o`, GRES
 * strings and Slurm's time formats. Pure: text in, values out. Captured real output lives in
 * test/fixtures/slurm/ and the unit tests run these parsers on it.
 *
 * The one-line form is `Key=value Key=value …` where some values contain spaces (`OS=Linux 6.1 #1 SMP`,
 * a foreign job's `Comment=`) and some keys repeat (`-d` prints `Nodes= CPU_IDs= Mem= GRES=` once per
 * node group). A token opens a new field when it looks like `Key=`; any other token continues the
 * previous value. A foreign value containing ` Word=` is therefore split; the broker's own names and
 * comments are checked to contain no whitespace, so its fields always parse exactly.
 */
import { parseGresTypes } from './gres.js';
import { expandHostlist } from './hostlist.js';
import type { SlurmJob, SlurmJobState, SlurmNode, SlurmNodeGpus } from './types.js';

/** Key=value pairs of one `-o` line, in order (keys may repeat). */
export type SlurmFields = Array<[key: string, value: string]>;

const KEY = /^([A-Za-z][A-Za-z0-9_:/.]*)=(.*)$/s;

/** Splits one `-o` line into its fields (see the module note on spaces). */
export function parseFields(line: string): SlurmFields {
  const fields: SlurmFields = [];
  for (const token of line.trim().split(/\s+/)) {
    if (token === '') continue;
    const m = KEY.exec(token);
    if (m) fields.push([m[1] as string, m[2] as string]);
    else {
      const last = fields[fields.length - 1];
      if (last) last[1] = last[1] === '' ? token : `${last[1]} ${token}`;
    }
  }
  return fields;
}

/** First value of `key`, or undefined. */
export function field(fields: SlurmFields, key: string): string | undefined {
  for (const [k, v] of fields) if (k === key) return v;
  return undefined;
}

/** `(null)`, `N/A`, `None`, `Unknown` and '' become null. */
export function nullable(value: string | undefined): string | null {
  if (value === undefined) return null;
  const v = value.trim();
  if (v === '' || v === '(null)' || v === 'N/A' || v === 'None' || v === 'Unknown' || v === 'n/a')
    return null;
  return v;
}

const STATES: ReadonlySet<string> = new Set<SlurmJobState>([
  'PENDING',
  'CONFIGURING',
  'RUNNING',
  'SUSPENDED',
  'COMPLETING',
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'TIMEOUT',
  'NODE_FAIL',
  'OUT_OF_MEMORY',
  'PREEMPTED',
  'BOOT_FAIL',
  'DEADLINE',
  'REQUEUED',
  'RESIZING',
  'REVOKED',
  'SPECIAL_EXIT',
  'STOPPED',
]);

/** Maps Slurm's state word (`CANCELLED by 0`, `RUNNING+…`, sacct's short forms) to a SlurmJobState. */
export function parseJobState(raw: string): SlurmJobState {
  const word = (raw.trim().split(/[\s+]/)[0] ?? '').toUpperCase();
  if (STATES.has(word)) return word as SlurmJobState;
  const short: Record<string, SlurmJobState> = {
    PD: 'PENDING',
    R: 'RUNNING',
    CG: 'COMPLETING',
    CD: 'COMPLETED',
    F: 'FAILED',
    CA: 'CANCELLED',
    TO: 'TIMEOUT',
    NF: 'NODE_FAIL',
    OOM: 'OUT_OF_MEMORY',
    PR: 'PREEMPTED',
    BF: 'BOOT_FAIL',
    DL: 'DEADLINE',
    CF: 'CONFIGURING',
    S: 'SUSPENDED',
  };
  return short[word] ?? 'UNKNOWN';
}

/** States after which the job will not run again (COMPLETING is not one: cleanup still runs). */
export function isEndedState(state: SlurmJobState): boolean {
  return !(
    state === 'PENDING' ||
    state === 'CONFIGURING' ||
    state === 'RUNNING' ||
    state === 'SUSPENDED' ||
    state === 'COMPLETING' ||
    state === 'REQUEUED' ||
    state === 'RESIZING' ||
    state === 'STOPPED' ||
    state === 'UNKNOWN'
  );
}

/** `ExitCode=2:0` → {code: 2, signal: null}; `0:15` → {code: 0, signal: 15}. */
export function parseExitCode(value: string | undefined): { code: number; signal: number | null } | null {
  const m = /^(\d+):(\d+)$/.exec((value ?? '').trim());
  if (!m) return null;
  const signal = Number(m[2]);
  return { code: Number(m[1]), signal: signal === 0 ? null : signal };
}

/**
 * A Slurm timestamp (`2026-12-01T23:17:57`, local time of the scontrol process) to epoch ms. The driver
 * runs Slurm's commands with TZ=UTC and SLURM_TIME_FORMAT=standard, so the text is UTC.
 */
export function parseSlurmTime(value: string | undefined): number | null {
  const v = nullable(value);
  if (v === null) return null;
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})$/.exec(v);
  if (!m) return null;
  const ms = Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!);
  return Number.isFinite(ms) ? ms : null;
}

/**
 * A Slurm duration (`365-00:00:00`, `1-02:03:04`, `02:03:04`, `03:04`, `5`) to seconds; UNLIMITED,
 * INFINITE, Partition_Limit and unparsable text give null. Bare minutes (`5`) are minutes, as in sbatch.
 */
export function parseSlurmDuration(value: string | undefined): number | null {
  const v = nullable(value);
  if (v === null) return null;
  const m = /^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$/.exec(v);
  if (!m) return null;
  const days = Number(m[1] ?? 0);
  const parts = [m[2], m[3], m[4]].filter((p): p is string => p !== undefined).map(Number);
  let secs: number;
  if (m[1] !== undefined) {
    // D-H, D-H:M, D-H:M:S
    secs = (parts[0] ?? 0) * 3600 + (parts[1] ?? 0) * 60 + (parts[2] ?? 0);
  } else if (parts.length === 3) secs = parts[0]! * 3600 + parts[1]! * 60 + parts[2]!;
  else if (parts.length === 2) secs = parts[0]! * 60 + parts[1]!;
  else secs = parts[0]! * 60;
  return days * 86400 + secs;
}

/**
 * Seconds to sbatch's `--time` (D-HH:MM:SS), rounded up to a whole minute because Slurm keeps limits
 * in minutes (`--time=0:0:30` becomes one minute anyway). At least one minute.
 */
export function formatSlurmTimeLimit(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds <= 0)
    throw new RangeError(`time limit must be > 0 s, got ${seconds}`);
  const minutes = Math.max(1, Math.ceil(seconds / 60));
  const d = Math.floor(minutes / 1440);
  const h = Math.floor((minutes % 1440) / 60);
  const m = minutes % 60;
  return `${d}-${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}:00`;
}

/** GPU part of a GRES string: count (all types summed) and indices when `(IDX:…)` is printed. */
export interface GpuGres {
  count: number;
  /** null when the string has no IDX for any gpu item. */
  indices: number[] | null;
}

/**
 * Parses GRES strings as Slurm prints them: `gpu:8`, `gpu:2(IDX:0-1)`, `gpu:a100:4(S:0-1)`,
 * `gpu:a100:2(IDX:0,3),gpu:v100:0(IDX:N/A)`, `gres:gpu:2` (TresPerNode), `(null)`. Non-gpu items are
 * ignored.
 */
export function parseGpuGres(value: string | undefined): GpuGres {
  const v = nullable(value);
  if (v === null) return { count: 0, indices: null };
  let count = 0;
  let indices: number[] | null = null;
  for (const item of splitOutsideParens(v)) {
    const paren = item.indexOf('(');
    const head = paren < 0 ? item : item.slice(0, paren);
    const extra = paren < 0 ? '' : item.slice(paren + 1, item.lastIndexOf(')'));
    const segs = head.split(':').filter((s) => s !== 'gres');
    if (segs[0] !== 'gpu') continue;
    const n = Number(segs[segs.length - 1]);
    if (segs.length >= 2 && Number.isInteger(n)) count += n;
    const idx = /(?:^|,)IDX:([^)]*)$/.exec(extra);
    if (idx) {
      indices ??= [];
      if (idx[1] !== 'N/A') indices.push(...parseIndexList(idx[1] as string));
    }
  }
  return { count, indices: indices === null ? null : [...new Set(indices)].sort((a, b) => a - b) };
}

/** `0-1,4` → [0, 1, 4]. */
export function parseIndexList(text: string): number[] {
  const out: number[] = [];
  for (const part of text.split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part.trim());
    if (!m) continue;
    const a = Number(m[1]);
    const b = Number(m[2] ?? m[1]);
    for (let i = a; i <= b && i - a < 4096; i++) out.push(i);
  }
  return out;
}

function splitOutsideParens(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of text) {
    if (ch === '(') depth++;
    if (ch === ')') depth = Math.max(0, depth - 1);
    if (ch === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += ch;
  }
  if (cur !== '') parts.push(cur);
  return parts;
}

/** Per-node GPU indices from the repeated `Nodes=… GRES=…` groups of `scontrol show job -d -o`. */
export function parseJobNodeGpus(fields: SlurmFields): SlurmNodeGpus[] {
  const out: SlurmNodeGpus[] = [];
  let group: string[] | null = null;
  for (const [k, v] of fields) {
    if (k === 'Nodes') {
      group = expandHostlist(v);
      for (const node of group) out.push({ node, indices: [] });
    } else if (k === 'GRES' && group !== null) {
      const idx = parseGpuGres(v).indices ?? [];
      for (const entry of out) if (group.includes(entry.node)) entry.indices = idx;
      group = null;
    }
  }
  return out;
}

/** One `scontrol show job -d -o` line to a SlurmJob. */
export function parseJobLine(line: string): SlurmJob {
  const f = parseFields(line);
  const rawState = field(f, 'JobState') ?? '';
  const state = parseJobState(rawState);
  const exit = isEndedState(state) ? parseExitCode(field(f, 'ExitCode')) : null;
  const perNode = parseGpuGres(field(f, 'TresPerNode'));
  const numNodes = Number(field(f, 'NumNodes')?.split('-')[0]);
  const user = nullable(field(f, 'UserId'));
  return {
    id: field(f, 'JobId') ?? '',
    name: field(f, 'JobName') ?? '',
    comment: nullable(field(f, 'Comment')),
    user: user === null ? null : user.replace(/\(\d+\)$/, ''),
    partition: nullable(field(f, 'Partition')),
    account: nullable(field(f, 'Account')),
    state,
    rawState,
    reason: nullable(field(f, 'Reason')),
    exitCode: exit ? exit.code : null,
    signal: exit ? exit.signal : null,
    nodes: expandHostlist(nullable(field(f, 'NodeList')) ?? ''),
    gpus: parseJobNodeGpus(f),
    gpusPerNode: perNode.count > 0 ? perNode.count : null,
    numNodes: Number.isInteger(numNodes) ? numNodes : null,
    submitTime: parseSlurmTime(field(f, 'SubmitTime')),
    startTime: state === 'PENDING' ? null : parseSlurmTime(field(f, 'StartTime')),
    endTime: isEndedState(state) ? parseSlurmTime(field(f, 'EndTime')) : null,
    timeLimitSeconds: parseSlurmDuration(field(f, 'TimeLimit')),
    workDir: nullable(field(f, 'WorkDir')),
    stdout: nullable(field(f, 'StdOut')),
    stderr: nullable(field(f, 'StdErr')),
    batchHost: nullable(field(f, 'BatchHost')),
  };
}

/** A node as parsed from one `scontrol show node -d -o` line, before GPU holders are attached. */
export type ParsedNode = Omit<SlurmNode, 'holders' | 'usedGpuIndices'> & {
  /** From `GresUsed=…(IDX:…)`; null when Slurm printed no indices. */
  usedGpuIndices: number[] | null;
};

const UNAVAILABLE_FLAGS = new Set([
  'DOWN',
  'DRAIN',
  'DRAINED',
  'DRAINING',
  'FAIL',
  'FAILING',
  'INVAL',
  'NOT_RESPONDING',
  'MAINTENANCE',
  'POWERED_DOWN',
  'POWERING_DOWN',
  'REBOOT_REQUESTED',
  'REBOOT_ISSUED',
  'FUTURE',
  'UNKNOWN',
]);

/** One `scontrol show node -d -o` line. */
export function parseNodeLine(line: string): ParsedNode {
  const f = parseFields(line);
  const [base = '', ...flags] = (field(f, 'State') ?? '').toUpperCase().split('+');
  // sinfo-style trailing markers (`IDLE*` = not responding, `~` powered off) may appear on some versions
  const cleanBase = base.replace(/[*~#!%$@^-]+$/, '');
  if (base !== cleanBase && base.endsWith('*')) flags.push('NOT_RESPONDING');
  const gres = parseGpuGres(field(f, 'Gres'));
  const used = parseGpuGres(field(f, 'GresUsed'));
  const cpus = Number(field(f, 'CPUTot') ?? field(f, 'CPUEfctv'));
  const realMemory = Number(field(f, 'RealMemory'));
  const types = parseGresTypes(nullable(field(f, 'Gres')));
  return {
    name: field(f, 'NodeName') ?? '',
    state: cleanBase,
    stateFlags: flags,
    unavailable: UNAVAILABLE_FLAGS.has(cleanBase) || flags.some((x) => UNAVAILABLE_FLAGS.has(x)),
    cpus: Number.isFinite(cpus) ? cpus : 0,
    gpus: gres.count,
    ...(types.some((t) => t.type !== null) ? { gresTypes: types } : {}),
    gpusUsed: used.count,
    usedGpuIndices: used.indices,
    reason: nullable(field(f, 'Reason')),
    partitions: (nullable(field(f, 'Partitions')) ?? '').split(',').filter((p) => p !== ''),
    realMemoryMib: Number.isInteger(realMemory) && realMemory > 1 ? realMemory : null,
  };
}
