import type { FastifyInstance } from 'fastify';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { BrokerDeps } from '../broker/deps.js';
import { CardStateSchema } from '../contracts/tools-cluster.js';
import { TaskStateSchema } from '../contracts/views.js';
import { isTerminalTask, type TaskState, TERMINAL_TASK_STATES } from '../domain/machines/task.js';
import { registerGrantGauge } from './grant-metrics.js';

/**
 * `GET /metrics` in Prometheus text format (prom-client). Like every route but /healthz it needs a
 * bearer token of a person or agent (Prometheus sends one with `authorization: credentials_file`).
 *
 * Two kinds of series:
 *  - gauges read at scrape time from the store and the fleet (cards by state, queue depth, tasks by
 *    state, workers, sampler errors, audit chain) — they can never drift from what the tools report;
 *  - histograms and counters fed by events: MCP tool latency (buildApp's `onToolCall`), admission
 *    latency (approval → worker `started`) and tasks finished, both from task change notifications.
 * Each master owns its registry, so several masters in one test process never share series.
 */

/** Path of the metrics route. */
export const METRICS_PATH = '/metrics';

const TOOL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25];
const ADMISSION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600, 14400];
/** Task ids remembered to count each start and finish once; older ids are forgotten first. */
const SEEN_LIMIT = 10_000;

/** What the metrics read besides deps. */
export interface MetricsOptions {
  /** Tool names used as label values; any other name a client sends is counted as `unknown`. */
  toolNames: readonly string[];
  /** Workers with an open WSS session. */
  connectedWorkers: () => number;
  /** Durations (ms) of recent scheduling passes. */
  passDurations?: () => readonly number[];
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
/** A gauge read at scrape time: its name, help and labels, and how it reads its value(s). */
interface ScrapedGauge {
  name: string;
  help: string;
  labelNames?: readonly string[];
  read(gauge: Gauge): void;
}

/** Cards by derived state, and how many are simulated. */
function cardGauges(deps: BrokerDeps): ScrapedGauge[] {
  const listCards = () =>
    deps.cluster.fleet.listCards(deps.store, deps.clock.now(), {
      sample_interval_ms: deps.config.timing.sample_interval_ms,
      vram_threshold_pct: deps.config.scheduling.vram_threshold_pct,
    });
  return [
    {
      name: 'gpu_broker_cards',
      help: 'Cards by derived state (AVAILABLE, LEASED, BUSY_FOREIGN, UNHEALTHY, CORDONED, QUARANTINED, UNKNOWN).',
      labelNames: ['state'],
      read(gauge) {
        const counts = new Map<string, number>(CardStateSchema.options.map((s) => [s, 0]));
        for (const c of listCards()) counts.set(c.state, (counts.get(c.state) ?? 0) + 1);
        for (const [state, n] of counts) gauge.set({ state }, n);
      },
    },
    {
      name: 'gpu_broker_cards_simulated',
      help: 'Cards that are simulated (no real GPU behind them).',
      read(gauge) {
        gauge.set(listCards().filter((c) => c.simulated).length);
      },
    },
    // MIG slices under their card (docs/decisions/0046-mig-slices-as-cards.md): one series per slice,
    // labelled as people name it (`0:mig:2/0`), with its parent card, profile, state and whether a lease
    // holds it; its memory (total and in use) and utilisation where the tool reports them (nvidia-smi has
    // no utilisation per instance, so that series is absent on real and simulated slices alike).
    {
      name: 'gpu_broker_mig_slices',
      help: 'MIG slices, one series per slice: 1, labelled with its worker, parent card, slice label, profile, derived state and whether a lease holds it.',
      labelNames: ['worker', 'card', 'slice', 'profile', 'state', 'leased'],
      read(gauge) {
        // A slice that went (a new layout) or changed state leaves no stale series behind.
        gauge.reset();
        for (const c of listCards()) {
          if (!c.mig) continue;
          gauge.set(
            {
              worker: c.worker_id,
              card: String(c.mig.parent_index),
              slice: c.label ?? String(c.index),
              profile: c.mig.profile,
              state: c.state,
              leased: String(c.task_id !== null),
            },
            1,
          );
        }
      },
    },
    {
      name: 'gpu_broker_mig_slice_memory_total_mib',
      help: "A MIG slice's memory in MiB (the tool's per-instance figure, or its profile's).",
      labelNames: ['worker', 'slice', 'profile'],
      read(gauge) {
        gauge.reset();
        for (const c of listCards())
          if (c.mig && c.memory_total_mib !== null)
            gauge.set(
              { worker: c.worker_id, slice: c.label ?? String(c.index), profile: c.mig.profile },
              c.memory_total_mib,
            );
      },
    },
    {
      name: 'gpu_broker_mig_slice_memory_used_mib',
      help: "A MIG slice's memory in use in MiB: its GPU instance's, from nvidia-smi's MIG devices table (absent where unmeasured).",
      labelNames: ['worker', 'slice', 'profile'],
      read(gauge) {
        gauge.reset();
        for (const c of listCards())
          if (c.mig && c.memory_used_mib !== null)
            gauge.set(
              { worker: c.worker_id, slice: c.label ?? String(c.index), profile: c.mig.profile },
              c.memory_used_mib,
            );
      },
    },
    {
      name: 'gpu_broker_mig_slice_utilization_pct',
      help: "A MIG slice's utilisation in percent, where the tool reports it per instance.",
      labelNames: ['worker', 'slice', 'profile'],
      read(gauge) {
        gauge.reset();
        for (const c of listCards())
          if (c.mig && c.utilization_pct !== null)
            gauge.set(
              { worker: c.worker_id, slice: c.label ?? String(c.index), profile: c.mig.profile },
              c.utilization_pct,
            );
      },
    },
  ];
}

/** Tasks by state, and the queue's depth. */
function taskGauges(deps: BrokerDeps): ScrapedGauge[] {
  return [
    {
      name: 'gpu_broker_tasks',
      help: 'Tasks by state.',
      labelNames: ['state'],
      read(gauge) {
        const counts = deps.store.tasks.countByState();
        for (const state of TaskStateSchema.options) gauge.set({ state }, counts[state] ?? 0);
      },
    },
    {
      name: 'gpu_broker_queue_depth',
      help: 'Tasks waiting in the queue (state QUEUED).',
      read(gauge) {
        gauge.set(deps.store.tasks.countByState()['QUEUED'] ?? 0);
      },
    },
  ];
}

/** Workers: open sessions, online or not, failing samplers. */
function workerGauges(deps: BrokerDeps, opts: MetricsOptions): ScrapedGauge[] {
  return [
    {
      name: 'gpu_broker_worker_connections',
      help: 'Workers with an open WSS session.',
      read(gauge) {
        gauge.set(opts.connectedWorkers());
      },
    },
    {
      name: 'gpu_broker_workers',
      help: 'Enrolled workers by whether they are online (connected and heard from recently).',
      labelNames: ['online'],
      read(gauge) {
        const now = deps.clock.now();
        const workers = deps.store.workers.list();
        const online = workers.filter((w) => deps.cluster.fleet.isOnline(w.id, now)).length;
        gauge.set({ online: 'true' }, online);
        gauge.set({ online: 'false' }, workers.length - online);
      },
    },
    {
      name: 'gpu_broker_sampler_errors',
      help: 'Workers whose latest card sample failed (their cards are UNKNOWN and not scheduled).',
      read(gauge) {
        gauge.set(deps.store.workers.list().filter((w) => deps.cluster.fleet.get(w.id).sampler_error).length);
      },
    },
  ];
}

/** The master's own health: the audit chain's check and the storage guard's. */
function healthGauges(deps: BrokerDeps): ScrapedGauge[] {
  return [
    {
      name: 'gpu_broker_audit_chain_ok',
      help: "1 while the hash-chained audit log verifies, 0 once it does not (the background check's last result).",
      read(gauge) {
        gauge.set(deps.auditStatus().ok ? 1 : 0);
      },
    },
    {
      name: 'gpu_broker_storage_free_bytes',
      help: "Free bytes on the data dir's filesystem at the storage guard's last check (-1: unknown).",
      read(gauge) {
        gauge.set(deps.storage?.status().free_bytes ?? -1);
      },
    },
    {
      name: 'gpu_broker_storage_accepts_writes',
      help: '1 while the master takes writes that grow its store, 0 while it refuses them (disk full: UNAVAILABLE).',
      read(gauge) {
        gauge.set(deps.storage?.status().ok === false ? 0 : 1);
      },
    },
    {
      name: 'gpu_broker_audit_events',
      help: 'Rows of the live audit table verified so far (archived rows not counted).',
      read(gauge) {
        gauge.set(deps.auditStatus().events);
      },
    },
  ];
}

/** p50, p99 and max of the recent scheduling passes, when the master reports them. */
function passGauges(opts: MetricsOptions): ScrapedGauge[] {
  const passes = opts.passDurations;
  if (!passes) return [];
  return [
    {
      name: 'gpu_broker_scheduling_pass_seconds',
      help: 'Duration of recent scheduling passes (up to the last 1000): p50, p99 and max.',
      labelNames: ['stat'],
      read(gauge) {
        const sorted = [...passes()].sort((a, b) => a - b);
        const at = (q: number) =>
          (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0) / 1000;
        gauge.set({ stat: 'p50' }, at(0.5));
        gauge.set({ stat: 'p99' }, at(0.99));
        gauge.set({ stat: 'max' }, (sorted[sorted.length - 1] ?? 0) / 1000);
      },
    },
  ];
}

/** Registers the gauges read at scrape time, in the order `/metrics` lists them. */
function registerScrapedGauges(deps: BrokerDeps, opts: MetricsOptions, registers: Registry[]): void {
  const gauges = [
    ...cardGauges(deps),
    ...taskGauges(deps),
    ...workerGauges(deps, opts),
    ...healthGauges(deps),
    ...passGauges(opts),
  ];
  // The usage ledger, a counter read at scrape time: it only grows (a lease is charged once, when it ends).
  new Counter({
    name: 'gpu_broker_card_seconds_total',
    help: 'Card-seconds charged to leases that ended, by account, card model and whether the cards were simulated (docs/operations.md "Accounts and usage").',
    labelNames: ['account', 'model', 'simulated'],
    registers,
    collect() {
      this.reset();
      for (const t of deps.store.usage.totals())
        this.inc({ account: t.account, model: t.model, simulated: String(t.simulated) }, t.card_seconds);
    },
  });
  // Reclaim by preemption (docs/operations.md "Borrowing and reclaim"): every lease the scheduler asked
  // to give its cards back, read from the preemptions table (it only grows).
  new Counter({
    name: 'gpu_broker_preemptions_total',
    help: 'Leases the scheduler asked to give their cards back to an account asking within its nominal share.',
    registers,
    collect() {
      this.reset();
      this.inc(deps.store.preemptions.total());
    },
  });
  for (const { name, help, labelNames = [], read } of gauges) {
    new Gauge({
      name,
      help,
      labelNames,
      registers,
      collect() {
        read(this);
      },
    });
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
