/** Latency statistics and the result table shared by every benchmark section. */

/** One benchmark section: starts what it needs, measures, stops it again, returns one row per operation. */
export interface BenchSection {
  name: string;
  description: string;
  run(): Promise<OpResult[]>;
}

/** One measured operation. */
export interface OpResult {
  section: string;
  op: string;
  calls: number;
  errors: number;
  seconds: number;
  callsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Anything else worth a column (e.g. the master's RSS after the run). */
  notes: string;
}

/** The nearest-rank percentile of sorted values (p in 0..100). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** Summarises latencies (ms) measured over `seconds` of wall time. */
export function summarise(
  section: string,
  op: string,
  latencies: number[],
  errors: number,
  seconds: number,
  notes = '',
): OpResult {
  const sorted = [...latencies].sort((a, b) => a - b);
  return {
    section,
    op,
    calls: sorted.length,
    errors,
    seconds,
    callsPerSecond: sorted.length / seconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    maxMs: sorted[sorted.length - 1] ?? Number.NaN,
    notes,
  };
}

/** Formats results as a Markdown table (readable in a terminal, pasteable into docs/performance.md). */
export function markdownTable(rows: readonly OpResult[]): string {
  const header = [
    'section',
    'operation',
    'calls',
    'errors',
    'seconds',
    'calls/s',
    'p50 ms',
    'p99 ms',
    'max ms',
    'notes',
  ];
  const lines = rows.map((r) => [
    r.section,
    r.op,
    String(r.calls),
    String(r.errors),
    r.seconds.toFixed(1),
    r.callsPerSecond.toFixed(0),
    r.p50Ms.toFixed(1),
    r.p99Ms.toFixed(1),
    r.maxMs.toFixed(1),
    r.notes,
  ]);
  const all = [header, ...lines];
  const widths = header.map((_, i) => Math.max(...all.map((l) => (l[i] ?? '').length)));
  const fmt = (l: string[]) => `| ${l.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  return [fmt(header), `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`, ...lines.map(fmt)].join('\n');
}
