import { join, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { BrokerDeps } from './broker/deps.js';
import type { AuditMonitor } from './broker/loops/audit-monitor.js';
import type { ProposalPruning } from './broker/loops/proposal-pruning.js';
import type { StorageGuard } from './broker/loops/storage-guard.js';
import { newSweepMarks, tick } from './broker/loops/sweep.js';
import type { TaskRetention } from './broker/loops/task-retention.js';
import { BrokerError } from './contracts/errors.js';
import { buildMasterApp, composeMaster, type MasterOptions, type MasterParts } from './master/compose.js';
import { OPERATOR_TOKEN_FILE } from './master/data-dir.js';
import { isLoopback, type MasterConfig, parseListen } from './platform/config.js';
import { createLogger } from './platform/logger.js';
import { raiseNofile } from './platform/nofile.js';
import { ensureDevTls } from './platform/tls.js';

/**
 * Starts the master (`gpu-broker serve`): wires it (src/master/compose.ts), prepares TLS, builds the
 * app, starts the background timers and listens. The CLI is the only caller that exits.
 */

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
  /** Pruning of abandoned proposals and old unreviewed revisions (`pruning`); tests call `run()`. */
  pruning: ProposalPruning;
  close(): Promise<void>;
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
  if (config.http.raise_nofile) {
    const nofile = raiseNofile(process.pid);
    if (nofile.raised) logger.info(nofile, 'RLIMIT_NOFILE raised to the hard limit');
    else logger.info(nofile, 'RLIMIT_NOFILE left as it is');
  }
  const parts = composeMaster(opts, { dataDir, logger, env: process.env });
  const { deps, audit, storage, retention, pruning, qualification } = parts;
  const tls = config.tls.mode === 'auto' ? await ensureDevTls(dataDir, { sans: config.tls.sans }) : null;
  const app = await buildMasterApp(parts, tls);
  const stopTimers = await startTimers(parts, config, logger);

  try {
    await app.listen({ host, port });
  } catch (err) {
    stopTimers();
    await audit.stop();
    await retention.stop();
    await pruning.stop();
    parts.unsubscribe();
    await app.close().catch(() => undefined);
    deps.store.close();
    throw listenError(err, config.listen);
  }
  const url = listeningUrl(app, host, port, tls !== null);
  qualification.setEndpoint(url, tls?.caCertPath ?? null);
  return {
    url,
    caCertPath: tls?.caCertPath ?? null,
    operatorTokenPath: join(dataDir, OPERATOR_TOKEN_FILE),
    bootstrappedOperatorToken: parts.bootstrappedOperatorToken,
    deps,
    app,
    audit,
    storage,
    retention,
    pruning,
    async close() {
      stopTimers();
      // Runs drive the master through its own endpoint: stop them (CANCELLED) while it still answers.
      await qualification.close();
      parts.unsubscribe();
      // Wake agents parked in wait_for_* so their answers go out now, not after up to 25 s.
      deps.notifier.close();
      await app.close();
      await audit.stop();
      await retention.stop();
      await pruning.stop();
      deps.store.close();
    },
  };
}

/**
 * Starts the master's background timers (sweep, audit, disk guard, retention, pruning); resolves after
 * the first disk check, with the function that stops them all.
 */
async function startTimers(parts: MasterParts, config: MasterConfig, logger: Logger): Promise<() => void> {
  const { deps, hub, audit, storage, retention, pruning } = parts;
  const sweep = { broker: deps, revalidateSessions: () => hub.revalidate(), marks: newSweepMarks() };
  const sweeper = setInterval(() => {
    try {
      tick(sweep, deps.clock.now());
    } catch (err) {
      logger.error({ err }, 'sweep failed');
    }
  }, config.timing.sweep_interval_ms);
  sweeper.unref();
  // Never blocks a request for more than one batch: see src/broker/loops/audit-monitor.ts.
  void audit.tick();
  const auditTimer = setInterval(() => void audit.tick(), config.audit.check_interval_ms);
  auditTimer.unref();
  // The first check before listening, so a master started on a full disk says so from its first answer.
  await storage.check();
  const storageTimer = setInterval(() => void storage.check(), config.storage.check_interval_ms);
  storageTimer.unref();
  const runRetention = () =>
    void retention.run().catch((err: unknown) => logger.error({ err }, 'task retention failed'));
  const retentionTimer = setInterval(runRetention, config.storage.retention.interval_seconds * 1000);
  retentionTimer.unref();
  const runPruning = () =>
    void pruning.run().catch((err: unknown) => logger.error({ err }, 'proposal pruning failed'));
  const pruningTimer = setInterval(runPruning, config.pruning.interval_seconds * 1000);
  pruningTimer.unref();
  // Once at start too: a master restarted more often than the interval would otherwise never prune.
  runRetention();
  runPruning();
  return () => {
    clearInterval(sweeper);
    clearInterval(auditTimer);
    clearInterval(storageTimer);
    clearInterval(retentionTimer);
    clearInterval(pruningTimer);
  };
}

/** The URL the master answers on: the bound port, and a wildcard address as 127.0.0.1. */
function listeningUrl(app: FastifyInstance, host: string, port: number, tls: boolean): string {
  const addr = app.server.address();
  const boundPort = typeof addr === 'object' && addr ? addr.port : port;
  const urlHost = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
  return `${tls ? 'https' : 'http'}://${urlHost}:${boundPort}`;
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
