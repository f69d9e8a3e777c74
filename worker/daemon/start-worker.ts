import { randomUUID } from 'node:crypto';
import { hostname as osHostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { BrokerError } from '../../src/contracts/errors.js';
import type { CardSample } from '../../src/contracts/sample.js';
import { HELLO_MAX_EXECUTIONS, type WorkerMessage } from '../../src/contracts/worker-protocol.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import { createPrivateFile, describeTightened } from '../../src/platform/file-modes.js';
import { createLogger } from '../../src/platform/logger.js';
import { DEFAULT_EXECUTION_RETENTION, pruneExecutionDirs } from '../executions/dir-retention.js';
import { ExecutionManager } from '../executions/manager.js';
import type { WorkerConnection } from '../link/connection.js';
import { connectForever, workerConnectUrl } from '../link/connection.js';
import { OutboxSender, type OutboxTransport } from '../link/outbox.js';
import { SamplingLoop } from '../samplers/loop.js';
import { type LocalStore, openLocalStore } from '../store/local-store.js';
import { InputCache } from '../task-io/input-cache.js';
import { httpsBlobFetcher } from '../task-io/input-fetch.js';
import type { InputSource } from '../task-io/inputs.js';
import { declaredMountsProblem, mountsAsDeclared } from '../task-io/mounts.js';
import { secureWorkerDataDir } from './data-dir-modes.js';
import { type BackendBinding, bindBackend } from './executors.js';
import { buildHello, type HelloMessage, hostResources, packageVersion } from './hello.js';
import { type InboxLink, MasterInbox } from './inbound.js';
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

/**
 * Step 0: the declared mounts bind exactly the paths declared (task-io/mounts.ts): canonical, resolving
 * to themselves, none inside a writable one or a hidden path, no writable one holding a hidden path.
 * Refuses to start otherwise (INVALID_INPUT), before anything is opened.
 */
async function checkDeclaredMounts(opts: WorkerOptions): Promise<void> {
  const mounts = opts.mounts ?? [];
  if (mounts.length === 0) return;
  const slurm = opts.slurm?.backend;
  const hidden = [
    opts.dataDir,
    ...(opts.sandbox?.kind === 'bwrap' ? opts.sandbox.hiddenPaths : []),
    ...(slurm === undefined ? [] : [slurm.jobDir, ...(slurm.sandbox?.setup.hiddenPaths ?? [])]),
  ];
  const problem =
    declaredMountsProblem(mounts, hidden) ??
    (await mountsAsDeclared(mounts.map((m) => ({ name: m.name, hostPath: m.host_path }))));
  if (problem !== null)
    throw new BrokerError(
      'INVALID_INPUT',
      problem,
      'Declare each --mount by its real path, apart from writable mounts and from the worker\'s own dirs (docs/operations.md "Named data mounts").',
    );
}

/** Step 1: secures the data dir (data-dir-modes.ts) and opens `<dataDir>/worker.sqlite` (0600). */
function openWorkerStore(opts: WorkerOptions, log: Logger, clock: Clock): LocalStore {
  const tightened = secureWorkerDataDir(opts.dataDir, opts.runAs);
  if (tightened.length > 0)
    log.warn(`worker: data dir was readable by others; tightened ${describeTightened(tightened)}`);
  const storePath = join(opts.dataDir, 'worker.sqlite');
  createPrivateFile(storePath);
  return openLocalStore(storePath, { clock });
}

/** Where tasks' inputs come from: the local cache, filled from the master's blob route. */
function taskInputs(opts: WorkerOptions, clock: Clock): InputSource {
  const cache = new InputCache(
    join(opts.dataDir, 'input-cache'),
    opts.inputCacheBytes ?? DEFAULT_INPUT_CACHE_BYTES,
    clock,
  );
  cache.removeLeftovers();
  return {
    cache,
    fetch: httpsBlobFetcher({
      masterUrl: opts.masterUrl,
      token: opts.token,
      ...(opts.ca === undefined ? {} : { ca: opts.ca }),
    }),
  };
}

/**
 * Finished execution directories: pruned now and then; the first pass waits for recovery. After close
 * the store is shut: a pass then logs the refusal and does nothing. Returns the timer to clear.
 */
function startDirPruning(
  opts: WorkerOptions,
  store: LocalStore,
  executionsRoot: string,
  recovery: Promise<void>,
  clock: Clock,
  log: Logger,
): NodeJS.Timeout {
  const pruneDirs = () => {
    try {
      pruneExecutionDirs(
        store,
        executionsRoot,
        clock.now(),
        opts.executionRetention ?? DEFAULT_EXECUTION_RETENTION,
        log,
      );
    } catch (err) {
      log.warn({ err }, 'worker: execution directory retention failed');
    }
  };
  void recovery.then(pruneDirs, pruneDirs);
  const pruneTimer = setInterval(pruneDirs, opts.executionPruneIntervalMs ?? EXECUTION_PRUNE_INTERVAL_MS);
  pruneTimer.unref();
  return pruneTimer;
}

/** Step 3: starts sampling and waits (briefly) for the first sample, so `hello` carries real cards. */
async function startSampling(sampling: SamplingLoop, waitMs: number): Promise<void> {
  sampling.start();
  let firstWait: NodeJS.Timeout | undefined;
  await Promise.race([
    sampling.firstAttempt,
    new Promise((r) => {
      firstWait = setTimeout(r, waitMs);
    }),
  ]);
  clearTimeout(firstWait);
}

/**
 * The sampling loop: each report goes out as the latest `sample`, with the cards executions hold; the
 * cards of a successful one also go to `onCards`.
 */
function samplingLoop(
  opts: WorkerOptions,
  store: LocalStore,
  outbox: OutboxSender,
  clock: Clock,
  log: Logger,
  onCards: (cards: CardSample[]) => void,
): SamplingLoop {
  return new SamplingLoop({
    sampler: opts.sampler,
    logger: log,
    intervalMs: opts.sampleIntervalMs ?? DEFAULT_SAMPLE_INTERVAL_MS,
    clock,
    onReport: ({ sampledAt, cards, samplerError }) => {
      if (samplerError === null) onCards(cards);
      outbox.enqueueLatest({
        type: 'sample',
        sampled_at: sampledAt,
        cards,
        sampler_error: samplerError,
        held_cards: heldCards(store),
      });
    },
  });
}

/** Says how tasks are isolated and whether container tasks can run here. */
function logSandbox(opts: WorkerOptions, log: Logger): void {
  log.info(
    { isolation: opts.sandbox?.kind ?? 'none', container_engine: opts.containers?.setup.engine ?? null },
    opts.containers === undefined
      ? 'worker: no container engine; container tasks wait for a worker that has one'
      : `worker: container tasks run with ${opts.containers.setup.engine}`,
  );
}

/** The hello of each connection (hello.ts), from the facts as they are when it is sent. */
function helloFor(
  opts: WorkerOptions,
  bootId: string,
  store: LocalStore,
  sampling: SamplingLoop,
  binding: BackendBinding,
): () => HelloMessage {
  const version = opts.version ?? packageVersion();
  // A Slurm pool's tasks run on its nodes, whose memory Slurm accounts for: no host of its own.
  const host =
    opts.slurm !== undefined
      ? null
      : opts.hostResources !== undefined
        ? opts.hostResources
        : hostResources(opts.dataDir);
  return () =>
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
      seccomp:
        opts.sandbox?.kind === 'bwrap' && opts.sandbox.seccomp != null
          ? { version: opts.sandbox.seccomp.version, allowed: [...opts.sandbox.seccomp.allowed] }
          : null,
      host,
    });
}

/** Step 4: dials the master, and again for ever (link/connection.ts); the inbox hears each event. */
function connectToMaster(
  opts: WorkerOptions,
  url: string,
  log: Logger,
  inbox: MasterInbox,
): WorkerConnection {
  return connectForever({
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
}

/** What the worker keeps running, and stops in this order on close. */
interface WorkerParts {
  inbox: MasterInbox;
  pruneTimer: NodeJS.Timeout;
  upkeep: { recovery: Promise<void>; stop(): void };
  recoveryAbort: AbortController;
  sampling: SamplingLoop;
  executions: ExecutionManager;
  outbox: OutboxSender;
  conn: () => WorkerConnection | null;
  store: LocalStore;
  clock: Clock;
  log: Logger;
}

/**
 * A clean stop: no new work, timers and upkeep stopped, running executions stopped and reported,
 * queued messages flushed while the master acknowledges them (briefly), then the link and the store.
 */
async function stopWorker(p: WorkerParts): Promise<void> {
  p.inbox.stop();
  clearInterval(p.pruneTimer);
  p.upkeep.stop();
  p.log.info({ running: p.executions.runningCount() }, 'worker: stopping');
  p.sampling.stop();
  p.recoveryAbort.abort();
  await p.executions.stopAll();
  await p.upkeep.recovery;
  const flushEnd = p.clock.now() + FLUSH_WAIT_MS;
  while (p.inbox.welcomed && p.outbox.hasUnacked() && p.clock.now() < flushEnd) await sleep(20);
  p.inbox.dispose();
  await p.conn()?.close();
  p.store.close();
  p.log.info('worker: stopped');
}

/** Starts the worker; see the module comment. Resolves once it is dialling the master. */
export async function startWorker(opts: WorkerOptions): Promise<RunningWorker> {
  const logger = opts.logger ?? createLogger();
  const url = workerConnectUrl(opts.masterUrl);
  const bootId = randomUUID();
  const log = logger.child({ worker_id: opts.workerId, boot_id: bootId });
  const clock = opts.clock ?? systemClock;

  // 0. the declared mounts; 1. store
  await checkDeclaredMounts(opts);
  const store = openWorkerStore(opts, log, clock);

  let conn: WorkerConnection | null = null;
  const ports = linkPorts(() => conn);
  const outbox = new OutboxSender(store, bootId, ports.transport, log, clock);
  // A successful sample also tells the executions which leased cards are gone (ADR 0046 §7).
  const sampling = samplingLoop(opts, store, outbox, clock, log, (cards) => executions.cardsSampled(cards));
  const { binding, executions } = bindExecutions(opts, store, outbox, sampling, clock, log);
  logSandbox(opts, log);

  // 2. what the previous process left behind (and, on a Slurm worker, fencing: slurm/recovery.ts)
  const recoveryAbort = new AbortController();
  const upkeep = binding.startUpkeep(executions, recoveryAbort.signal);
  const pruneTimer = startDirPruning(opts, store, binding.executionsRoot, upkeep.recovery, clock, log);

  // 3. sampling
  await startSampling(sampling, opts.firstSampleWaitMs ?? FIRST_SAMPLE_WAIT_MS);

  const hello = helloFor(opts, bootId, store, sampling, binding);
  const inbox = new MasterInbox({
    workerId: opts.workerId,
    store,
    outbox,
    executions,
    sampling,
    logger: log,
    link: ports.link,
    hello,
    welcomeTimeoutMs: opts.welcomeTimeoutMs ?? DEFAULT_WELCOME_TIMEOUT_MS,
  });

  // 4. connect
  conn = connectToMaster(opts, url, log, inbox);

  const parts = { inbox, pruneTimer, upkeep, recoveryAbort, sampling, executions, outbox, store, clock, log };
  let closing: Promise<void> | null = null;
  return {
    bootId,
    workerId: opts.workerId,
    provider: opts.sampler.provider,
    isConnected: () => inbox.welcomed && conn?.isOpen() === true,
    latestCards: () => sampling.latestCards(),
    close() {
      closing ??= stopWorker({ ...parts, conn: () => conn });
      return closing;
    },
  };
}

/** The outbox's and the inbox's view of the link: whichever socket is current, or none. */
function linkPorts(conn: () => WorkerConnection | null): { transport: OutboxTransport; link: InboxLink } {
  return {
    transport: {
      send: (text) => conn()?.send(text) ?? false,
      bufferedAmount: () => conn()?.bufferedAmount() ?? 0,
    },
    link: {
      send: (message: WorkerMessage) => {
        conn()?.send(JSON.stringify(message));
      },
      resetBackoff: () => conn()?.resetBackoff(),
      drop: (reason) => conn()?.drop(reason),
    },
  };
}

/**
 * The executions, on the Executor port's binding (daemon/executors.ts): Slurm jobs with
 * `--backend slurm`, else this host.
 */
function bindExecutions(
  opts: WorkerOptions,
  store: LocalStore,
  outbox: OutboxSender,
  sampling: SamplingLoop,
  clock: Clock,
  log: Logger,
): { binding: BackendBinding; executions: ExecutionManager } {
  const binding = bindBackend({
    opts,
    executionsDir: join(opts.dataDir, 'executions'),
    clock,
    inputs: taskInputs(opts, clock),
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
  return { binding, executions };
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
