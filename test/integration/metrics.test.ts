import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SimCluster, sleepSpec, startSimCluster } from '../e2e/sim-cluster.js';
import { waitFor } from '../support/wait.js';

/**
 * `/metrics` against a real master and a real (simulated) worker: the text parses strictly as the
 * Prometheus exposition format, the gauges agree with the cluster, and the counters and histograms move
 * when a task runs and when MCP tools are called.
 */

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
interface Family {
  type: string;
  help: string;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)/y;

/** Values as Prometheus reads them (Go's ParseFloat: NaN and Inf in any case; prom-client writes `Nan`). */
function parseValue(text: string, line: string): number {
  if (/^nan$/i.test(text)) return Number.NaN;
  if (/^\+?inf$/i.test(text)) return Number.POSITIVE_INFINITY;
  if (/^-inf$/i.test(text)) return Number.NEGATIVE_INFINITY;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`bad value in: ${line}`);
  return Number(text);
}

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const m = LABEL.exec(text);
    if (!m) throw new Error(`bad labels in: ${line}`);
    const key = m[1] ?? '';
    if (key in labels) throw new Error(`duplicate label ${key} in: ${line}`);
    labels[key] = (m[2] ?? '').replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return labels;
}

/** The family a sample belongs to (histogram and summary series carry suffixes). */
function familyOf(name: string, families: Map<string, Family>): Family | undefined {
  for (const suffix of ['', '_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const base = name.slice(0, name.length - suffix.length);
    const f = families.get(base);
    if (f && (suffix === '' || f.type === 'histogram' || f.type === 'summary')) return f;
  }
  return undefined;
}

/**
 * A strict parser of the Prometheus text format 0.0.4: every sample belongs to a family declared by
 * HELP and TYPE before it, names and labels are well formed, no series repeats, and histogram buckets
 * are cumulative and end in +Inf equal to _count.
 */
function parsePrometheus(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  if (!text.endsWith('\n')) throw new Error('exposition must end with a newline');
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
    if (meta) {
      const [, kind, name = '', rest = ''] = meta;
      if (!NAME.test(name)) throw new Error(`bad metric name: ${line}`);
      const f = families.get(name) ?? { type: '', help: '', samples: [] };
      if (kind === 'TYPE') {
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest))
          throw new Error(`bad type: ${line}`);
        if (f.type) throw new Error(`TYPE repeated: ${line}`);
        f.type = rest;
      } else f.help = rest;
      families.set(name, f);
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    if (!m) throw new Error(`bad sample line: ${line}`);
    const [, name = '', labelText = '', valueText = ''] = m;
    const family = familyOf(name, families);
    if (!family?.type) throw new Error(`sample before its TYPE: ${line}`);
    const labels = parseLabels(labelText, line);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(key)) throw new Error(`series repeated: ${line}`);
    seen.add(key);
    family.samples.push({ name, labels, value: parseValue(valueText, line) });
  }
  for (const [name, f] of families) {
    if (f.type !== 'histogram') continue;
    const groups = new Map<string, Sample[]>();
    for (const s of f.samples.filter((x) => x.name === `${name}_bucket`)) {
      const { le: _le, ...rest } = s.labels;
      const k = JSON.stringify(Object.entries(rest).sort());
      groups.set(k, [...(groups.get(k) ?? []), s]);
    }
    for (const [k, buckets] of groups) {
      let last = 0;
      for (const b of buckets) {
        if (b.value < last) throw new Error(`${name}: buckets not cumulative`);
        last = b.value;
      }
      const inf = buckets.at(-1);
      const count = f.samples.find(
        (s) => s.name === `${name}_count` && JSON.stringify(Object.entries(s.labels).sort()) === k,
      );
      if (inf?.labels['le'] !== '+Inf' || inf.value !== count?.value)
        throw new Error(`${name}: last bucket must be +Inf and equal _count`);
    }
  }
  return families;
}

/** The value of one series, or undefined. */
function value(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const family = familyOf(name, families);
  return family?.samples.find(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  )?.value;
}

describe('/metrics', () => {
  let c: SimCluster;
  const scrape = async (token: string | null) => {
    const res = await c.tm.fetch(new URL('/metrics', c.tm.url), {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
  };
  const metrics = async () => {
    const res = await scrape(c.tm.operatorToken);
    expect(res.status).toBe(200);
    return parsePrometheus(res.text);
  };

  beforeAll(async () => {
    c = await startSimCluster(4);
  });
  afterAll(async () => {
    await c?.close();
  });

  it('answers 401 without a token and 403 to a worker token', async () => {
    const anonymous = await scrape(null);
    expect(anonymous.status).toBe(401);
    expect(anonymous.text).not.toContain('gpu_broker_');
    const worker = await scrape(c.tm.createToken('other-worker', ['worker'], 'w-other'));
    expect(worker.status).toBe(403);
  });

  it('parses as Prometheus text and agrees with the cluster', async () => {
    const res = await scrape(c.submitterToken);
    expect(res.status).toBe(200);
    expect(res.type).toMatch(/^text\/plain; version=0\.0\.4/);
    const m = parsePrometheus(res.text);
    expect(m.get('gpu_broker_cards')?.type).toBe('gauge');
    expect(value(m, 'gpu_broker_cards', { state: 'AVAILABLE' })).toBe(4);
    expect(value(m, 'gpu_broker_cards', { state: 'LEASED' })).toBe(0);
    expect(value(m, 'gpu_broker_cards_simulated')).toBe(4);
    expect(value(m, 'gpu_broker_worker_connections')).toBe(1);
    expect(value(m, 'gpu_broker_workers', { online: 'true' })).toBe(1);
    expect(value(m, 'gpu_broker_sampler_errors')).toBe(0);
    expect(value(m, 'gpu_broker_audit_chain_ok')).toBe(1);
    expect(value(m, 'gpu_broker_queue_depth')).toBe(0);
    expect(m.get('gpu_broker_tasks_finished_total')?.type).toBe('counter');
    expect(value(m, 'gpu_broker_tasks_finished_total', { state: 'COMPLETED' })).toBe(0);
    expect(m.get('gpu_broker_admission_latency_seconds')?.type).toBe('histogram');
    expect(value(m, 'gpu_broker_admission_latency_seconds_count')).toBe(0);
    expect(m.get('gpu_broker_mcp_tool_duration_seconds')?.type).toBe('histogram');
    expect(m.has('process_resident_memory_bytes')).toBe(true);
  });

  it('moves the tool latency histogram by tool and outcome', async () => {
    const client = await c.tm.mcpClient(c.submitterToken);
    expect((await c.tm.callTool(client, 'list_cards', {})).ok).toBe(true);
    const failed = await c.tm.callTool(client, 'get_task', { task_id: 'task_does_not_exist' });
    expect(failed.error?.code).toBe('NOT_FOUND');
    const m = await metrics();
    expect(
      value(m, 'gpu_broker_mcp_tool_duration_seconds_count', { tool: 'list_cards', outcome: 'ok' }),
    ).toBe(1);
    expect(
      value(m, 'gpu_broker_mcp_tool_duration_seconds_count', { tool: 'get_task', outcome: 'error' }),
    ).toBe(1);
  });

  it('moves the task counters and the admission histogram when a task runs', async () => {
    const before = await metrics();
    const p = await c.propose(sleepSpec(2));
    const taskId = await c.approve(p);
    await c.waitForTask(taskId, ['RUNNING']);
    const during = await metrics();
    expect(value(during, 'gpu_broker_cards', { state: 'LEASED' })).toBe(1);
    expect(value(during, 'gpu_broker_tasks', { state: 'RUNNING' })).toBe(1);
    expect(value(during, 'gpu_broker_admission_latency_seconds_count')).toBe(1);
    expect(value(during, 'gpu_broker_admission_latency_seconds_sum')).toBeGreaterThanOrEqual(0);

    await c.waitForTask(taskId, ['COMPLETED']);
    const after = await waitFor(
      async () => {
        const m = await metrics();
        return value(m, 'gpu_broker_tasks_finished_total', { state: 'COMPLETED' }) === 1 &&
          value(m, 'gpu_broker_cards', { state: 'AVAILABLE' }) === 4
          ? m
          : null;
      },
      { timeoutMs: 15_000, what: 'the finished counter at 1 and every card AVAILABLE again' },
    );
    expect(value(before, 'gpu_broker_tasks', { state: 'COMPLETED' })).toBe(0);
    expect(value(after, 'gpu_broker_tasks', { state: 'COMPLETED' })).toBe(1);
    expect(value(after, 'gpu_broker_tasks_finished_total', { state: 'FAILED' })).toBe(0);
    expect(value(after, 'gpu_broker_admission_latency_seconds_count')).toBe(1);
  });
});
