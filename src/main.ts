import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { workloadPath, workloadSha256 } from '../qualification/workload/location.js';
import { buildApp } from './app.js';
import type { BrokerDeps } from './broker/deps.js';
import { Fleet } from './broker/fleet.js';
import { AuditMonitor } from './broker/loops/audit-monitor.js';
import { logAuditEvents } from './broker/loops/event-log.js';
import { sweepExecutions } from './broker/loops/liveness.js';
import { Scheduler } from './broker/loops/scheduler.js';
import { type StatfsFn, StorageGuard } from './broker/loops/storage-guard.js';
import { TaskRetention } from './broker/loops/task-retention.js';
import { Notifier } from './broker/notifier.js';
import { createPrincipal } from './broker/principals.js';
import { brokerTools } from './broker/tools/catalog.js';
import { collectBlobGarbage } from './broker/tools/inputs.js';
import { expireProposals } from './broker/tools/proposals.js';
import { cancelInterruptedRuns } from './broker/tools/qualification.js';
import { CARDS_TOPIC, TASKS_TOPIC } from './broker/topics.js';
import { BrokerError } from './contracts/errors.js';
import { pinnedScripts } from './contracts/policy.js';
import { registerDashboard } from './http/dashboard.js';
import { registerEventStream } from './http/events.js';
import { createMetrics } from './http/metrics.js';
import { QualificationService, type QualificationServiceOptions } from './master/qualification-service.js';
import { type Clock, systemClock } from './platform/clock.js';
import { isLoopback, type MasterConfig, parseListen } from './platform/config.js';
import {
  createPrivateFile,
  describeTightened,
  secureDataDir,
  type Tightened,
  writeSecretFile,
} from './platform/file-modes.js';
import { createIdGenerator } from './platform/ids.js';
import { createLogger, type Logger } from './platform/logger.js';
import { ensureDevTls } from './platform/tls.js';
import { Store } from './store/store.js';
import { WorkerHub } from './ws/hub.js';

/**
 * Composition root of the master (`gpu-broker serve`): opens the store, bootstraps the operator token,
 * prepares TLS, builds the app, starts the sweepers and listens. The CLI is the only caller that exits.
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

/** A running master. */
export interface RunningMaster {
  url: string;
  caCertPath: string | null;
  operatorTokenPath: string;
  /** Set only when this start created the operator token (first start). */
  bootstrappedOperatorToken: string | null;
  deps: BrokerDeps;
  app: FastifyInstance;
  /** The background audit verifier; `/healthz`, `/status` and `/metrics` read its last result. */
  audit: AuditMonitor;
  /** The disk guard: `/healthz`, `get_status` and every write path read it; tests call `check()`. */
  storage: StorageGuard;
  /** The task log/output retention sweep (`storage.retention`); tests call `run()`. */
  retention: TaskRetention;
  close(): Promise<void>;
}

/** How often acknowledged outbox rows and old idempotency keys are pruned. */
const RETENTION_SWEEP_MS = 10 * 60_000;
/** Acknowledged worker messages are kept a day for diagnosis. */
const ACKED_OUTBOX_RETENTION_MS = 24 * 3600_000;
/** Idempotency keys are honoured for a week; a retry after that is a new request (docs/mcp-tools.md). */
const IDEMPOTENCY_RETENTION_MS = 7 * 24 * 3600_000;

/** File holding the bootstrap operator token, mode 0600. */
export const OPERATOR_TOKEN_FILE = 'operator.token';

/**
 * The master's secret files, relative to its data dir: the database and its WAL, the tokens that
 * `serve` and `start` write, and the TLS private keys (tls.ts). Certificates stay as written (0644) but
 * sit in the 0700 dir.
 */
export const MASTER_SECRET_FILES = [
  'broker.db',
  'broker.db-wal',
  'broker.db-shm',
  OPERATOR_TOKEN_FILE,
  'worker.token',
  'agent.token',
  'reviewer.token',
  'tls/ca-key.pem',
  'tls/server-key.pem',
] as const;

/**
 * Makes the data dir 0700 and the secret files in it 0600 (issue 9 row 7: a pre-existing 0755 dir left
 * broker.db 0644), or throws naming what it cannot tighten; returns what it changed.
 */
export function secureMasterDataDir(dataDir: string): Tightened[] {
  return secureDataDir({ dir: dataDir, dirMode: 0o700, files: MASTER_SECRET_FILES, secretDirs: ['tls'] });
}

/**
 * Opens the store in a data dir: secures the dir first (a warning through `warn` names each path
 * tightened), and creates broker.db 0600 before SQLite opens it so it and its -wal/-shm never exist
 * with a looser mode.
 */
export function openStore(dataDir: string, warn: (message: string) => void = () => undefined): Store {
  const tightened = secureMasterDataDir(dataDir);
  if (tightened.length > 0)
    warn(`data dir was readable by others; tightened ${describeTightened(tightened)}`);
  const path = join(dataDir, 'broker.db');
  createPrivateFile(path);
  return Store.open(path);
}

/** Creates the first operator on an empty database and writes its token file; no-op afterwards. */
export function bootstrapOperator(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'ids'>,
  dataDir: string,
): string | null {
  if (deps.store.principals.list().length > 0) return null;
  const { token } = createPrincipal(deps, { name: 'operator', roles: ['operator'] }, 'bootstrap');
  const path = join(dataDir, OPERATOR_TOKEN_FILE);
  writeSecretFile(path, `${token}\n`);
  return token;
}

/** Starts a master and resolves once it listens. */
export async function startMaster(opts: MasterOptions): Promise<RunningMaster> {
  const dataDir = resolve(opts.dataDir);
  const { config } = opts;
  const { host, port } = parseListen(config.listen);
  if (config.tls.mode === 'off' && !isLoopback(host))
    throw new BrokerError(
      'INVALID_INPUT',
      `--tls off is refused on ${host}: plain HTTP only on a loopback address`,
      'Keep TLS on (the default) or listen on 127.0.0.1.',
    );
  const logger = opts.logger ?? createLogger();
  const store = openStore(dataDir, (message) => logger.warn({ data_dir: dataDir }, message));
  const clock = opts.clock ?? systemClock;
  const ids = createIdGenerator();
  const auditMonitor = new AuditMonitor(store, clock, auditMonitorOptions(config, dataDir), logger);
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
    logger,
    observe: { placement: (id) => scheduler!.placement(id), queueInfo: (id) => scheduler!.queueInfo(id) },
    auditStatus: () => auditMonitor.status(),
    storage,
    cluster: {
      fleet,
      link: { bootId: ids('boot'), flush: (w) => hub!.flush(w) },
      requestPass: () => scheduler!.requestPass(),
      failingGrants: () => scheduler?.failingGrantsList() ?? [],
    },
  };
  logAuditEvents(deps);
  hub = new WorkerHub(deps, fleet, deps.cluster.link.bootId);
  scheduler = new Scheduler(deps, fleet, hub);
  hub.hooks = scheduler;
  const hubRef = hub;
  storage.onRecovered(() => {
    hubRef.retryPendingHellos();
    scheduler!.requestPass();
  });
  const sched = scheduler;
  const metrics = createMetrics(deps, {
    toolNames: brokerTools().map((t) => t.def.name),
    connectedWorkers: () => hub!.connectedWorkers().length,
    passDurations: () => sched.passDurations,
  });
  const unsubscribe = deps.notifier.onAny((topic) => {
    if (topic === TASKS_TOPIC || topic === CARDS_TOPIC) sched.requestPass();
  });
  const bootstrapped = bootstrapOperator(deps, dataDir);
  const qualification = new QualificationService(deps, { env: process.env, ...opts.qualification, dataDir });
  deps.qualification = qualification;
  cancelInterruptedRuns(deps);
  const tls = config.tls.mode === 'auto' ? await ensureDevTls(dataDir, { sans: config.tls.sans }) : null;

  const app = await buildApp(deps, {
    tools: brokerTools(),
    https: tls ? { key: tls.key, cert: tls.cert } : undefined,
    health: () => {
      return {
        audit: deps.auditStatus(),
        storage: storage.status(),
        workers: { connected: hub!.connectedWorkers().length },
      };
    },
    onToolCall: metrics.onToolCall,
    extend: (a) => {
      hub!.attach(a);
      registerDashboard(a);
      registerEventStream(a, deps);
      metrics.register(a);
    },
  });

  let lastRetention = 0;
  let lastRevalidate = 0;
  const sweeper = setInterval(() => {
    try {
      const now = clock.now();
      if (now - lastRetention > RETENTION_SWEEP_MS) {
        lastRetention = now;
        store.transaction(() => {
          store.outbox.prune(now - ACKED_OUTBOX_RETENTION_MS);
          store.idempotency.prune(now - IDEMPOTENCY_RETENTION_MS);
        });
        collectBlobGarbage(deps);
      }
      if (now - lastRevalidate > 5000) {
        lastRevalidate = now;
        hub!.revalidate();
      }
      expireProposals(deps);
      sweepExecutions(deps, fleet);
      sched.requestPass();
    } catch (err) {
      logger.error({ err }, 'sweep failed');
    }
  }, config.timing.sweep_interval_ms);
  sweeper.unref();
  // Never blocks a request for more than one batch: see src/broker/loops/audit-monitor.ts.
  void auditMonitor.tick();
  const auditTimer = setInterval(() => void auditMonitor.tick(), config.audit.check_interval_ms);
  auditTimer.unref();
  // The first check before listening, so a master started on a full disk says so from its first answer.
  await storage.check();
  const storageTimer = setInterval(() => void storage.check(), config.storage.check_interval_ms);
  storageTimer.unref();
  const retentionTimer = setInterval(
    () => void retention.run().catch((err: unknown) => logger.error({ err }, 'task retention failed')),
    config.storage.retention.interval_seconds * 1000,
  );
  retentionTimer.unref();
  // Once at start too: a master restarted more often than the interval would otherwise never prune.
  void retention.run().catch((err: unknown) => logger.error({ err }, 'task retention failed'));
  const stopTimers = () => {
    clearInterval(sweeper);
    clearInterval(auditTimer);
    clearInterval(storageTimer);
    clearInterval(retentionTimer);
  };

  try {
    await app.listen({ host, port });
  } catch (err) {
    stopTimers();
    await auditMonitor.stop();
    await retention.stop();
    unsubscribe();
    await app.close().catch(() => undefined);
    store.close();
    throw listenError(err, config.listen);
  }
  const addr = app.server.address();
  const boundPort = typeof addr === 'object' && addr ? addr.port : port;
  const urlHost = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
  const url = `${tls ? 'https' : 'http'}://${urlHost}:${boundPort}`;
  qualification.setEndpoint(url, tls?.caCertPath ?? null);
  return {
    url,
    caCertPath: tls?.caCertPath ?? null,
    operatorTokenPath: join(dataDir, OPERATOR_TOKEN_FILE),
    bootstrappedOperatorToken: bootstrapped,
    deps,
    app,
    audit: auditMonitor,
    storage,
    retention,
    async close() {
      stopTimers();
      // Runs drive the master through its own endpoint: stop them (CANCELLED) while it still answers.
      await qualification.close();
      unsubscribe();
      // Wake agents parked in wait_for_* so their answers go out now, not after up to 25 s.
      deps.notifier.close();
      await app.close();
      await auditMonitor.stop();
      await retention.stop();
      store.close();
    },
  };
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

/** Turns a failed listen into an error that says what to do. */
function listenError(err: unknown, listen: string): unknown {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE')
    return new BrokerError(
      'UNAVAILABLE',
      `${listen} is already in use`,
      'Stop what listens there, or pass --listen HOST:PORT.',
    );
  if (code === 'EACCES')
    return new BrokerError(
      'INVALID_INPUT',
      `not allowed to listen on ${listen}`,
      'Use a port above 1023, or run with the needed privileges.',
    );
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND')
    return new BrokerError(
      'INVALID_INPUT',
      `${listen} is not an address of this machine`,
      'Pass --listen with a local address, e.g. 127.0.0.1:8443.',
    );
  return err;
}

/**
 * The bundled qualification workload is always allowed, pinned by its sha256 (DESIGN §5: with no config
 * file nothing else is). It runs under `qualification_python` (default /usr/bin/python3, where Debian's
 * python3-torch installs).
 */
export function withBundledWorkload(config: MasterConfig): MasterConfig {
  const script = workloadPath();
  if (pinnedScripts(config.policy.scripts).some((s) => s.script === script)) return config;
  const rule = { interpreter: config.qualification_python, script, sha256: workloadSha256() };
  return { ...config, policy: { ...config.policy, scripts: [...config.policy.scripts, rule] } };
}

/** Reads a token file (trimmed), with a clear error when missing. */
export function readTokenFile(path: string): string {
  if (!existsSync(path))
    throw new BrokerError(
      'NOT_FOUND',
      `token file ${path} does not exist`,
      'Create one with `gpu-broker token create`.',
    );
  return readFileSync(path, 'utf8').trim();
}
