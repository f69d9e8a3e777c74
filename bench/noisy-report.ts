import type { ScenarioName } from './noisy-floods.js';
import type { AgentSample, CallSample, TaskSample } from './noisy-victims.js';
import { type OpResult, percentile, summarise } from './stats.js';

/**
 * The noisy-neighbour bench's results: one summary table of each scenario against idle (ratios), and
 * the usual rows of `npm run bench` (bench/stats.ts) with the same numbers, for --json.
 */

/** What one scenario measured. */
export interface ScenarioResult {
  name: ScenarioName;
  flood: string;
  /** Where the flooding client ran: 'child, nice 19' or 'inline' (NOISY_FLOOD_PROCESS). */
  floodProcess: string;
  seconds: number;
  agent: AgentSample | null;
  tasks: TaskSample | null;
  /** The master's RSS as the window began (what earlier floods left behind shows here). */
  masterRssStartMiB: number;
  /** Peaks over the window, sampled every 200 ms. */
  masterRssMiB: number;
  masterFds: number;
  workerRssMiB: number;
  /** The worker's data dir at the end of the window. */
  workerDiskMiB: number;
  /** What the flood did, or why the scenario failed. */
  floodNotes: string;
  settleSeconds: number;
  /** Whether settling stopped at its limit (NOISY_SETTLE_S) rather than on prompt answers. */
  settleLimited: boolean;
  /** Set when the scenario could not run (its flood did not start, the master died, …). */
  error?: string;
}

const pct = (xs: readonly number[], p: number) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    p,
  );
const ms = (x: number) => (Number.isNaN(x) ? '–' : x < 10 ? x.toFixed(1) : x.toFixed(0));
const ratio = (x: number, base: number) =>
  Number.isNaN(x) || Number.isNaN(base) || base <= 0 ? '–' : `×${(x / base).toFixed(x / base < 10 ? 1 : 0)}`;

/** p50 and p99 (or max, for a few tasks) of a sample, as numbers. */
function pair(xs: readonly number[] | undefined, high: number): [number, number] {
  return xs && xs.length > 0 ? [pct(xs, 50), pct(xs, high)] : [Number.NaN, Number.NaN];
}

function cells(
  xs: readonly number[] | undefined,
  base: readonly number[] | undefined,
  high: number,
): string[] {
  const [a, b] = pair(xs, high);
  const [c, d] = pair(base, high);
  return [`${ms(a)} / ${ms(b)}`, `${ratio(a, c)} / ${ratio(b, d)}`];
}

/** The summary table (Markdown) of every scenario against the idle one, then each flood's outcome. */
export function summaryTable(results: readonly ScenarioResult[]): string {
  const idle = results.find((r) => r.name === 'idle');
  const header = [
    'scenario',
    'flood',
    'flood client',
    'get_status p50 / p99 ms',
    '× idle',
    'POST proposals p50 / p99 ms',
    '× idle',
    'task submit → started p50 / max ms',
    '× idle',
    'task submit → finished p50 / max ms',
    '× idle',
    'errors agent / tasks',
    'master RSS start → peak',
    'master fds peak',
    'worker RSS peak, disk',
  ];
  const lines = results.map((r) => {
    const errs = r.agent ? r.agent.status.errors + r.agent.create.errors : Number.NaN;
    return [
      r.name,
      r.flood,
      r.floodProcess,
      ...cells(r.agent?.status.latencies, idle?.agent?.status.latencies, 99),
      ...cells(r.agent?.create.latencies, idle?.agent?.create.latencies, 99),
      ...cells(r.tasks?.toStarted, idle?.tasks?.toStarted, 100),
      ...cells(r.tasks?.toFinished, idle?.tasks?.toFinished, 100),
      `${Number.isNaN(errs) ? '–' : errs} / ${r.tasks ? `${r.tasks.errors} of ${r.tasks.toStarted.length}` : '–'}`,
      `${r.masterRssStartMiB.toFixed(0)} → ${r.masterRssMiB.toFixed(0)} MiB`,
      String(r.masterFds),
      `${r.workerRssMiB.toFixed(0)} MiB, ${r.workerDiskMiB.toFixed(0)} MiB`,
    ];
  });
  const fmt = (l: string[]) => `| ${l.join(' | ')} |`;
  const notes = results.map((r) => {
    const kinds = errorKinds(r);
    return (
      `- ${r.name}: ${r.error ? `FAILED: ${r.error}; ` : ''}${r.floodNotes}` +
      (kinds ? `; errors: ${kinds}` : '') +
      (r.settleSeconds > 0.5 ? `; then ${settled(r)} until get_status answered promptly again` : '')
    );
  });
  return [fmt(header), fmt(header.map(() => '---')), ...lines.map(fmt), '', ...notes].join('\n');
}

function settled(r: ScenarioResult): string {
  return `${r.settleLimited ? '≥ ' : ''}${r.settleSeconds.toFixed(1)} s${r.settleLimited ? ' (the limit)' : ''}`;
}

function errorKinds(r: ScenarioResult): string {
  const all = new Map<string, number>();
  const add = (prefix: string, m: Map<string, number> | undefined) => {
    for (const [k, v] of m ?? []) all.set(`${prefix} ${k}`, (all.get(`${prefix} ${k}`) ?? 0) + v);
  };
  add('get_status', r.agent?.status.errorKinds);
  add('POST proposals', r.agent?.create.errorKinds);
  add('task', r.tasks?.errorKinds);
  return [...all].map(([k, v]) => `${v} × ${k}`).join(', ');
}

/** The rows of `npm run bench` for every scenario, with the ratios to idle in the notes. */
export function resultRows(results: readonly ScenarioResult[]): OpResult[] {
  const idle = results.find((r) => r.name === 'idle');
  const rows: OpResult[] = [];
  const vsIdle = (xs: readonly number[], base: readonly number[] | undefined, high: number) => {
    const [a, b] = pair(xs, high);
    const [c, d] = pair(base, high);
    return `${ratio(a, c)} p50, ${ratio(b, d)} ${high === 100 ? 'max' : 'p99'} vs idle`;
  };
  const callRow = (r: ScenarioResult, op: string, s: CallSample, base: CallSample | undefined, extra = '') =>
    summarise(
      'noisy',
      `${r.name}: ${op}`,
      s.latencies,
      s.errors,
      r.seconds,
      `${vsIdle(s.latencies, base?.latencies, 99)}${extra}`,
    );
  for (const r of results) {
    const head =
      `flood: ${r.flood} (client ${r.floodProcess}); master RSS ${r.masterRssStartMiB.toFixed(0)} → peak ${r.masterRssMiB.toFixed(0)} MiB, ` +
      `fds peak ${r.masterFds}`;
    if (!r.agent || !r.tasks) {
      rows.push(summarise('noisy', `${r.name}: not run`, [], 1, r.seconds, `${head}; ${r.error ?? ''}`));
      continue;
    }
    rows.push(callRow(r, 'agent get_status (MCP)', r.agent.status, idle?.agent?.status, `; ${head}`));
    rows.push(callRow(r, 'agent POST /api/v1/proposals (REST)', r.agent.create, idle?.agent?.create));
    const t = r.tasks;
    rows.push(
      summarise(
        'noisy',
        `${r.name}: task submit → started`,
        t.toStarted,
        t.errors,
        r.seconds,
        vsIdle(t.toStarted, idle?.tasks?.toStarted, 100),
      ),
    );
    rows.push(
      summarise(
        'noisy',
        `${r.name}: task submit → finished`,
        t.toFinished,
        t.errors,
        r.seconds,
        vsIdle(t.toFinished, idle?.tasks?.toFinished, 100),
      ),
    );
  }
  return rows;
}
