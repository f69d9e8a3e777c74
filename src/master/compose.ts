import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../app.js';
import type { BrokerDeps } from '../broker/deps.js';
import { BrokerEvents } from '../broker/events.js';
import { Fleet } from '../broker/fleet.js';
import { AuditMonitor } from '../broker/loops/audit-monitor.js';
import { logAuditEvents } from '../broker/loops/event-log.js';
import { ProposalPruning } from '../broker/loops/proposal-pruning.js';
import { SCHEDULER_TOPICS, Scheduler } from '../broker/loops/scheduler.js';
import { type StatfsFn, StorageGuard } from '../broker/loops/storage-guard.js';
import { TaskRetention } from '../broker/loops/task-retention.js';
import { Notifier } from '../broker/notifier.js';
import { createBrokerRuntime } from '../broker/runtime.js';
import { brokerTools } from '../broker/tools/catalog.js';
import { cancelInterruptedRuns } from '../broker/tools/qualification.js';
import { registerDashboard } from '../http/dashboard.js';
import { registerEventStream } from '../http/events.js';
import { type BrokerMetrics, createMetrics } from '../http/metrics.js';
import { type Clock, systemClock } from '../platform/clock.js';
import type { MasterConfig } from '../platform/config.js';
import { createIdGenerator } from '../platform/ids.js';
import type { Logger } from '../platform/logger.js';
import type { DevTls } from '../platform/tls.js';
import { WorkerHub } from '../ws/hub.js';
import { withBundledWorkload } from './bundled-workload.js';
import { bootstrapOperator, openStore } from './data-dir.js';
import { QualificationService, type QualificationServiceOptions } from './qualification-service.js';

/**
 * The master's wiring: the store, the use cases' deps, the hub, the scheduler and the background loops,
 * connected to each other; and the app built on them. Nothing here listens or starts a timer (src/main.ts
 * does both).
 */

/** Options for starting a master. */
export interface MasterOptions {
  dataDir: string;
  config: MasterConfig;
  logger?: Logger;
  clock?: Clock;
  /** Qualification runner settings; `env` (default: this process's) is what agent CLIs are launched with. */
  qualification?: Partial<QualificationServiceOptions>;
  /** Reads the data dir's free space (default `fs.statfs`); tests inject a fake disk. */
  statfs?: StatfsFn;
}

/** The wired master, before its app is built. */
export interface MasterParts {
  deps: BrokerDeps;
  hub: WorkerHub;
  scheduler: Scheduler;
  audit: AuditMonitor;
  storage: StorageGuard;
  retention: TaskRetention;
  /** Pruning of abandoned proposals and old unreviewed revisions (`pruning`). */
  pruning: ProposalPruning;
  metrics: BrokerMetrics;
  qualification: QualificationService;
  /** Set only when this start created the operator token (first start). */
  bootstrappedOperatorToken: string | null;
  /** The resolved data dir. */
  dataDir: string;
  /** Stops the scheduler's wake-up on task and card changes. */
  unsubscribe(): void;
}

/** Where a master is composed: its resolved data dir, its logger, and the environment agents inherit. */
export interface MasterSite {
  dataDir: string;
  logger: Logger;
  /** The process's environment (src/main.ts passes it: only main.ts and src/cli/ touch `process`). */
  env: Readonly<Record<string, string | undefined>>;
}

/**
 * Opens the store in the data dir and wires everything on it; bootstraps the operator and cancels
 * qualification runs a previous master left running.
 */
export function composeMaster(opts: MasterOptions, site: MasterSite): MasterParts {
  const { config } = opts;
  const { dataDir, logger } = site;
  const store = openStore(dataDir, (message) => logger.warn({ data_dir: dataDir }, message));
  const clock = opts.clock ?? systemClock;
  const ids = createIdGenerator();
  const audit = new AuditMonitor(store, clock, auditMonitorOptions(config, dataDir), logger);
  const storage = new StorageGuard(
    store,
    clock,
    {
      dataDir,
      warn_free_bytes: config.storage.warn_free_bytes,
      min_free_bytes: config.storage.min_free_bytes,
      statfs: opts.statfs,
    },
    logger,
  );
  const retention = new TaskRetention(store, clock, config.storage.retention, logger);
  const pruning = new ProposalPruning(store, clock, config.pruning, logger);
  const fleet = new Fleet(config.timing.worker_offline_seconds * 1000, clock.now());
  // The hub and the scheduler need deps and deps needs them: closures break the cycle.
  let hub: WorkerHub | undefined;
  let scheduler: Scheduler | undefined;
  const deps: BrokerDeps = {
    store,
    clock,
    ids,
    config: withBundledWorkload(config),
    notifier: new Notifier(),
    events: new BrokerEvents(),
    logger,
    observe: { placement: (id) => scheduler!.placement(id), queueInfo: (id) => scheduler!.queueInfo(id) },
    auditStatus: () => audit.status(),
    storage,
    cluster: {
      fleet,
      link: { bootId: ids('boot'), flush: (w) => hub!.flush(w) },
      requestPass: () => scheduler!.requestPass(),
      failingGrants: () => scheduler?.failingGrantsList() ?? [],
    },
    runtime: createBrokerRuntime(config),
  };
  logAuditEvents(deps);
  const theHub = new WorkerHub(deps, fleet, deps.cluster.link.bootId);
  hub = theHub;
  const sched = new Scheduler(deps, fleet, theHub);
  scheduler = sched;
  theHub.hooks = sched;
  storage.onRecovered(() => {
    theHub.retryPendingHellos();
    sched.requestPass();
  });
  const metrics = createMetrics(deps, {
    toolNames: brokerTools().map((t) => t.def.name),
    connectedWorkers: () => theHub.connectedWorkers().length,
    passDurations: () => sched.passDurations,
  });
  const unsubscribe = deps.notifier.onAny((topic) => {
    if (SCHEDULER_TOPICS.has(topic)) sched.requestPass();
  });
  const bootstrappedOperatorToken = bootstrapOperator(deps, dataDir);
  const qualification = new QualificationService(deps, { env: site.env, ...opts.qualification, dataDir });
  deps.qualification = qualification;
  cancelInterruptedRuns(deps);
  return {
    deps,
    hub: theHub,
    scheduler: sched,
    audit,
    storage,
    retention,
    pruning,
    metrics,
    qualification,
    bootstrappedOperatorToken,
    dataDir,
    unsubscribe,
  };
}

/** The master's app: the broker's tools, health, the worker socket, the dashboard, events and metrics. */
export function buildMasterApp(parts: MasterParts, tls: DevTls | null): Promise<FastifyInstance> {
  const { deps, hub, storage, metrics } = parts;
  return buildApp(deps, {
    tools: brokerTools(),
    https: tls ? { key: tls.key, cert: tls.cert } : undefined,
    health: () => ({
      audit: deps.auditStatus(),
      storage: storage.status(),
      workers: { connected: hub.connectedWorkers().length },
    }),
    onToolCall: metrics.onToolCall,
    uploadDir: join(parts.dataDir, 'uploads'),
    extend: (a) => {
      hub.attach(a);
      registerDashboard(a);
      registerEventStream(a, deps);
      metrics.register(a);
    },
  });
}

/** The audit monitor's settings from the master config (`audit`, docs/operations.md). */
function auditMonitorOptions(config: MasterConfig, dataDir: string) {
  const { audit } = config;
  return {
    dataDir,
    batch_size: audit.batch_size,
    full_interval_ms: audit.full_verify_interval_seconds * 1000,
    retention: audit.retention,
    retention_interval_ms: audit.retention.interval_seconds * 1000,
  };
}
