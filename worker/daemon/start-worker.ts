import { randomUUID } from 'node:crypto';
import { hostname as osHostname } from 'node:os';
import { join } from 'node:path';
import { HELLO_MAX_EXECUTIONS, type WorkerMessage } from '../../src/contracts/worker-protocol.js';
import { systemClock } from '../../src/platform/clock.js';
import { createPrivateFile, describeTightened } from '../../src/platform/file-modes.js';
import { createLogger } from '../../src/platform/logger.js';
import { DEFAULT_EXECUTION_RETENTION, pruneExecutionDirs } from '../executions/dir-retention.js';
import { ExecutionManager } from '../executions/manager.js';
import type { WorkerConnection } from '../link/connection.js';
import { connectForever, workerConnectUrl } from '../link/connection.js';
import { OutboxSender } from '../link/outbox.js';
import { SamplingLoop } from '../samplers/loop.js';
import { type LocalStore, openLocalStore } from '../store/local-store.js';
import { InputCache } from '../task-io/input-cache.js';
import { httpsBlobFetcher } from '../task-io/input-fetch.js';
import { secureWorkerDataDir } from './data-dir-modes.js';
import { bindBackend } from './executors.js';
import { buildHello, packageVersion } from './hello.js';
import { MasterInbox } from './inbound.js';
import type { RunningWorker, WorkerOptions } from './options.js';

// The CLI and the test harnesses import these from here; re-exported so the split changes no importer.
export type { RunningWorker, WorkerOptions } from './options.js';

/**
 * The worker daemon (docs/architecture.md, docs/worker-protocol.md): one per GPU host, connected to the master over WSS.
 *
 * Start-up:
 *   1. secure the data dir (data-dir-modes.ts), open `<dataDir>/worker.sqlite` (0600); a new boot id;
 *   2. report executions a previous process left unfinished (local/recovery.ts);
 *   3. start sampling; wait (briefly) for the first sample so `hello` carries real cards;
 *   4. connect, and reconnect for ever (link/connection.ts).
 * Per connection: hello (hello.ts) → welcome (sample interval, worker_marks) → outbox resend
 * (link/outbox.ts) → live. Incoming sequenced messages (assign, cancel, query) are processed at most once
 * per (master boot id, seq) and acknowledged either way; nothing the master sends can stop the worker
 * (inbound.ts). Which backend runs the tasks, and what it does besides (recovery, Slurm fencing), is
 * bound in one place (executors.ts).
 */

const DEFAULT_SAMPLE_INTERVAL_MS = 2_000;
const DEFAULT_INPUT_CACHE_BYTES = 4 * 1024 * 1024 * 1024;
const DEFAULT_WELCOME_TIMEOUT_MS = 10_000;

/** hello waits at most this long for the first sample; a hanging tool must not delay connecting. */
const FIRST_SAMPLE_WAIT_MS = 3_000;
/** Finished execution directories are pruned this often. */
const EXECUTION_PRUNE_INTERVAL_MS = 3600_000;
/** A clean stop waits at most this long for the master to acknowledge queued messages. */
const FLUSH_WAIT_MS = 2_000;

/** Starts the worker; see the module comment. Resolves once it is dialling the master. */
export async function startWorker(opts: WorkerOptions): Promise<RunningWorker> {
  const logger = opts.logger ?? createLogger();
  const url = workerConnectUrl(opts.masterUrl);
  const bootId = randomUUID();
  const log = logger.child({ worker_id: opts.workerId, boot_id: bootId });
  const clock = opts.clock ?? systemClock;

  // 1. store
  const tightened = secureWorkerDataDir(opts.dataDir, opts.runAs);
  if (tightened.length > 0)
    log.warn(`worker: data dir was readable by others; tightened ${describeTightened(tightened)}`);
  const storePath = join(opts.dataDir, 'worker.sqlite');
  createPrivateFile(storePath);
  const store = openLocalStore(storePath, { clock });

  let conn: WorkerConnection | null = null;
  const outbox = new OutboxSender(
    store,
    bootId,
    { send: (text) => conn?.send(text) ?? false, bufferedAmount: () => conn?.bufferedAmount() ?? 0 },
    log,
    clock,
  );
  const sampling = new SamplingLoop({
    sampler: opts.sampler,
    logger: log,
    intervalMs: opts.sampleIntervalMs ?? DEFAULT_SAMPLE_INTERVAL_MS,
    clock,
    onReport: ({ sampledAt, cards, samplerError }) =>
      outbox.enqueueLatest({
        type: 'sample',
        sampled_at: sampledAt,
        cards,
        sampler_error: samplerError,
        held_cards: heldCards(store),
      }),
  });
  const inputs = {
    cache: new InputCache(
      join(opts.dataDir, 'input-cache'),
      opts.inputCacheBytes ?? DEFAULT_INPUT_CACHE_BYTES,
      clock,
    ),
    fetch: httpsBlobFetcher({
      masterUrl: opts.masterUrl,
      token: opts.token,
      ...(opts.ca === undefined ? {} : { ca: opts.ca }),
    }),
  };
  // The Executor port's binding (daemon/executors.ts): Slurm jobs with `--backend slurm`, else this host.
  const binding = bindBackend({
    opts,
    executionsDir: join(opts.dataDir, 'executions'),
    clock,
    inputs,
    store,
    outbox,
    logger: log,
  });
  const executions = new ExecutionManager({
    store,
    outbox,
    logger: log,
    sampler: opts.sampler,
    latestCards: () => sampling.latestCards(),
    executor: binding.executor,
  });
  log.info(
    { isolation: opts.sandbox?.kind ?? 'none', container_engine: opts.containers?.setup.engine ?? null },
    opts.containers === undefined
      ? 'worker: no container engine; container tasks wait for a worker that has one'
      : `worker: container tasks run with ${opts.containers.setup.engine}`,
  );

  // 2. what the previous process left behind (and, on a Slurm worker, fencing: slurm/recovery.ts)
  const recoveryAbort = new AbortController();
  const upkeep = binding.startUpkeep(executions, recoveryAbort.signal);
  const recovery = upkeep.recovery;

  // Finished execution directories: pruned now and then; the first pass waits for recovery.
  const pruneDirs = () => {
    try {
      pruneExecutionDirs(
        store,
        binding.executionsRoot,
        clock.now(),
        opts.executionRetention ?? DEFAULT_EXECUTION_RETENTION,
        log,
      );
    } catch (err) {
      log.warn({ err }, 'worker: execution directory retention failed');
    }
  };
  // After close the store is shut: pruneDirs then logs the refusal and does nothing.
  void recovery.then(pruneDirs, pruneDirs);
  const pruneTimer = setInterval(pruneDirs, opts.executionPruneIntervalMs ?? EXECUTION_PRUNE_INTERVAL_MS);
  pruneTimer.unref();

  // 3. sampling
  sampling.start();
  let firstWait: NodeJS.Timeout | undefined;
  await Promise.race([
    sampling.firstAttempt,
    new Promise((r) => {
      firstWait = setTimeout(r, opts.firstSampleWaitMs ?? FIRST_SAMPLE_WAIT_MS);
    }),
  ]);
  clearTimeout(firstWait);

  const version = opts.version ?? packageVersion();
  const hello = () =>
    buildHello({
      workerId: opts.workerId,
      bootId,
      version,
      hostname: opts.hostname ?? osHostname(),
      provider: opts.sampler.provider,
      cards: sampling.currentCards(),
      executions: store.listKnownExecutions(HELLO_MAX_EXECUTIONS),
      masterMarks: store.listMasterMarks(),
      cardEpochs: store.listCardEpochs(),
      isolation: opts.sandbox?.kind ?? 'none',
      containerEngine: opts.containers?.setup.engine ?? null,
      mounts: opts.mounts ?? [],
      backend: binding.backend,
      slurm: binding.pool(),
    });
  const inbox = new MasterInbox({
    workerId: opts.workerId,
    store,
    outbox,
    executions,
    sampling,
    logger: log,
    link: {
      send: (message: WorkerMessage) => {
        conn?.send(JSON.stringify(message));
      },
      resetBackoff: () => conn?.resetBackoff(),
      drop: (reason) => conn?.drop(reason),
    },
    hello,
    welcomeTimeoutMs: opts.welcomeTimeoutMs ?? DEFAULT_WELCOME_TIMEOUT_MS,
  });

  // 4. connect
  conn = connectForever({
    url,
    token: opts.token,
    ...(opts.ca === undefined ? {} : { ca: opts.ca }),
    logger: log,
    ...(opts.backoff === undefined ? {} : { backoff: opts.backoff }),
    ...(opts.pingIntervalMs === undefined ? {} : { pingIntervalMs: opts.pingIntervalMs }),
    onOpen: () => inbox.opened(),
    onMessage: (text) => inbox.receive(text),
    onClose: () => inbox.closed(),
  });

  let closing: Promise<void> | null = null;
  return {
    bootId,
    workerId: opts.workerId,
    provider: opts.sampler.provider,
    isConnected: () => inbox.welcomed && conn?.isOpen() === true,
    latestCards: () => sampling.latestCards(),
    close() {
      closing ??= (async () => {
        inbox.stop();
        clearInterval(pruneTimer);
        upkeep.stop();
        log.info({ running: executions.runningCount() }, 'worker: stopping');
        sampling.stop();
        recoveryAbort.abort();
        await executions.stopAll();
        await recovery;
        const flushEnd = clock.now() + FLUSH_WAIT_MS;
        while (inbox.welcomed && outbox.hasUnacked() && clock.now() < flushEnd) await sleep(20);
        inbox.dispose();
        await conn?.close();
        store.close();
        log.info('worker: stopped');
      })();
      return closing;
    },
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The cards this worker's unfinished executions hold, sorted (see `held_cards` in the sample message). */
function heldCards(store: LocalStore): number[] {
  const held = new Set<number>();
  for (const e of store.listUnfinishedExecutions()) for (const c of e.plan.cards) held.add(c.index);
  return [...held].sort((a, b) => a - b);
}
