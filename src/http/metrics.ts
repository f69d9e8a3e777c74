import type { FastifyInstance } from 'fastify';
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';
import type { BrokerDeps } from '../broker/deps.js';
import { isTerminalTask, type TaskState, TERMINAL_TASK_STATES } from '../domain/machines/task.js';
import { registerGrantGauge } from './grant-metrics.js';
import { type GaugeSources, registerScrapedGauges } from './metrics-gauges.js';

/**
 * `GET /metrics` in Prometheus text format (prom-client). Like every route but /healthz it needs a
 * bearer token of a person or agent (Prometheus sends one with `authorization: credentials_file`).
 *
 * Two kinds of series:
 *  - gauges read at scrape time from the store and the fleet (cards by state, queue depth, tasks by
 *    state, workers, sampler errors, audit chain) — they can never drift from what the tools report;
 *  - histograms and counters fed by events: MCP tool latency (buildApp's `onToolCall`), admission
 *    latency (approval → worker `started`) and tasks finished, both from the audit rows of task moves.
 * The gauges are metrics-gauges.ts's.
 * Each master owns its registry, so several masters in one test process never share series.
 */

/** Path of the metrics route. */
export const METRICS_PATH = '/metrics';

const TOOL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25];
const ADMISSION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600, 14400];
/** Task ids remembered to count each start and finish once; older ids are forgotten first. */
const SEEN_LIMIT = 10_000;

/** What the metrics read besides deps. */
export interface MetricsOptions extends GaugeSources {
  /** Tool names used as label values; any other name a client sends is counted as `unknown`. */
  toolNames: readonly string[];
  /** Node process metrics (memory, CPU, event loop); default true. */
  processMetrics?: boolean;
}

/** The master's metrics. */
export interface BrokerMetrics {
  readonly registry: Registry;
  /** buildApp's `onToolCall` hook: one MCP tool call took `ms`. */
  onToolCall(tool: string, ms: number, ok: boolean): void;
  /** Registers `GET /metrics` and follows task changes until the app closes. */
  register(app: FastifyInstance): void;
}

/** An insertion-ordered set that forgets its oldest members past a limit. */
class RecentIds {
  private readonly ids = new Set<string>();
  /** Whether `id` is there. */
  has(id: string): boolean {
    return this.ids.has(id);
  }

  /** Adds `id`; false if it was already there. */
  add(id: string): boolean {
    if (this.ids.has(id)) return false;
    this.ids.add(id);
    if (this.ids.size > SEEN_LIMIT) {
      const oldest = this.ids.values().next().value;
      if (oldest !== undefined) this.ids.delete(oldest);
    }
    return true;
  }
}
/** The series fed by events: tool latency, admission latency, tasks finished. */
function registerEventSeries(registers: Registry[]) {
  const toolLatency = new Histogram({
    name: 'gpu_broker_mcp_tool_duration_seconds',
    help: 'MCP tool call latency by tool and outcome (ok, error).',
    labelNames: ['tool', 'outcome'],
    buckets: TOOL_BUCKETS,
    registers,
  });
  const admission = new Histogram({
    name: 'gpu_broker_admission_latency_seconds',
    help: 'From approval to the worker reporting the task started (queue wait + dispatch).',
    buckets: ADMISSION_BUCKETS,
    registers,
  });
  const finished = new Counter({
    name: 'gpu_broker_tasks_finished_total',
    help: 'Tasks that reached a final state since the master started, by state.',
    labelNames: ['state'],
    registers,
  });
  for (const state of TERMINAL_TASK_STATES) finished.inc({ state }, 0);
  return { toolLatency, admission, finished, ...registerDecisionSeries(registers) };
}

/** Review decisions by kind (person, agent_reviewer, grant): confirm → decision time, and counts. */
function registerDecisionSeries(registers: Registry[]) {
  const decisionTime = new Histogram({
    name: 'gpu_broker_review_decision_seconds',
    help: 'From a revision confirmed for review to its decision, by who decided (person, agent_reviewer, grant).',
    labelNames: ['kind'],
    buckets: ADMISSION_BUCKETS,
    registers,
  });
  const decisions = new Counter({
    name: 'gpu_broker_review_decisions_total',
    help: 'Decisions on revisions in review since the master started, by kind and decision; share auto-approved = kind="grant" / all APPROVE.',
    labelNames: ['kind', 'decision'],
    registers,
  });
  return { decisionTime, decisions };
}

/** Creates the registry and its series; see the module comment. */
export function createMetrics(deps: BrokerDeps, opts: MetricsOptions): BrokerMetrics {
  const registry = new Registry();
  const registers = [registry];
  if (opts.processMetrics !== false) collectDefaultMetrics({ register: registry });
  registerScrapedGauges(deps, opts, registers);
  const { toolLatency, admission, finished, decisionTime, decisions } = registerEventSeries(registers);
  registerGrantGauge(deps, registers);

  const known = new Set(opts.toolNames);
  const started = new RecentIds();
  const ended = new RecentIds();
  /**
   * Counts a task's start and its end once each, from the audit row of each of its moves (every move of
   * a task is one, src/broker/machines/apply-move.ts) once it committed: a move to RUNNING, or an end
   * not seen to start, reads the task's two timestamps; an end is counted from the row alone. Before, each
   * `task:` notification read the task (about seven a task).
   */
  const onTaskMove = (id: string, to: string) => {
    const terminal = isTerminalTask(to as TaskState);
    if (!started.has(id) && (to === 'RUNNING' || terminal)) {
      const t = deps.store.tasks.startFacts(id);
      if (t && t.started_at !== null && started.add(id))
        admission.observe(Math.max(0, t.started_at - t.approved_at) / 1000);
    }
    if (terminal && ended.add(id)) finished.inc({ state: to });
  };

  return {
    registry,
    onToolCall(tool, ms, ok) {
      toolLatency.observe(
        { tool: known.has(tool) ? tool : 'unknown', outcome: ok ? 'ok' : 'error' },
        ms / 1000,
      );
    },
    register(app) {
      const unsubscribe = deps.store.audit.observe((e) => {
        if (e.subject_type !== 'task') return;
        const to = (e.data as { to?: unknown } | null)?.to;
        if (typeof to !== 'string') return;
        deps.store.afterCommit(() => {
          try {
            onTaskMove(e.subject_id, to);
          } catch (err) {
            deps.logger.warn({ err, task_id: e.subject_id }, 'metrics: could not read a changed task');
          }
        });
      });
      const unsubscribeDecisions = deps.events.on('review_decision', (e) => {
        decisionTime.observe({ kind: e.kind }, e.seconds);
        decisions.inc({ kind: e.kind, decision: e.decision });
      });
      app.addHook('onClose', async () => {
        unsubscribe();
        unsubscribeDecisions();
      });
      app.get(METRICS_PATH, async (_req, reply) => {
        reply.header('content-type', registry.contentType);
        reply.header('cache-control', 'no-store');
        return registry.metrics();
      });
    },
  };
}
