import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname as osHostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { CardSample, Provider } from '../../src/contracts/sample.js';
import {
  parseMessage,
  type Reply,
  receiveSequenced,
  repliesToInvalid,
} from '../../src/contracts/sequencing.js';
import type { MasterMessage, WorkerMessage } from '../../src/contracts/worker-protocol.js';
import {
  HELLO_MAX_EXECUTIONS,
  MasterMessageSchema,
  PROTOCOL_VERSION,
} from '../../src/contracts/worker-protocol.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import { createPrivateFile, describeTightened } from '../../src/platform/file-modes.js';
import { createLogger } from '../../src/platform/logger.js';
import { packageRoot } from '../../src/platform/package-root.js';
import {
  DEFAULT_EXECUTION_RETENTION,
  type ExecutionRetention,
  pruneExecutionDirs,
} from '../executions/dir-retention.js';
import type { Handled } from '../executions/manager.js';
import { ExecutionManager } from '../executions/manager.js';
import type { BackoffOptions, WorkerConnection } from '../link/connection.js';
import { connectForever, workerConnectUrl } from '../link/connection.js';
import { OutboxSender } from '../link/outbox.js';
import { recoverUnfinished } from '../local/recovery.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import { SamplingLoop } from '../samplers/loop.js';
import type { ContainerTasks } from '../sandbox/container.js';
import type { RunAs } from '../sandbox/run-as.js';
import type { SandboxSetup } from '../sandbox/setup.js';
import type { SlurmBackend } from '../slurm/backend.js';
import { fenceSlurmJobs, recoverSlurmExecutions } from '../slurm/recovery.js';
import type { SlurmPoolSampler } from '../slurm/sampler.js';
import { type LocalStore, openLocalStore } from '../store/local-store.js';
import { InputCache } from '../task-io/input-cache.js';
import { httpsBlobFetcher } from '../task-io/input-fetch.js';
import type { DataMount } from '../task-io/mounts.js';
import { secureWorkerDataDir } from './data-dir-modes.js';
import { localExecutor, slurmExecutor } from './executors.js';
import { probeInterpreter } from './interpreter-probe.js';

/**
 * The worker daemon (DESIGN §2, §8, §9): one per GPU host, connected to the master over WSS.
 *
 * Start-up:
 *   1. secure the data dir (data-dir-modes.ts), open `<dataDir>/worker.sqlite` (0600); a new boot id;
 *   2. report executions a previous process left unfinished (local/recovery.ts);
 *   3. start sampling; wait (briefly) for the first sample so `hello` carries real cards;
 *   4. connect, and reconnect for ever (link/connection.ts).
 * Per connection: hello → welcome (sample interval, worker_marks) → outbox resend (link/outbox.ts) →
 * live. Incoming sequenced messages (assign, cancel, query) are processed at most once per
 * (master boot id, seq) and acknowledged either way; nothing the master sends can stop the worker.
 */

/** Options of `startWorker`; the last group exists for tests and `gpu-broker start`. */
export interface WorkerOptions {
  /** The master's base URL: https://host:port, or http:// on loopback (ws:// and wss:// also work). */
  readonly masterUrl: string;
  /** The worker token. */
  readonly token: string;
  /** This worker's id (`--id`, default the host name). */
  readonly workerId: string;
  /** Holds worker.sqlite and the execution directories. */
  readonly dataDir: string;
  /** The card sampler (see samplers/select-sampler.ts). */
  readonly sampler: CardSampler;
  /** PEM of a private CA that signed the master's certificate. */
  readonly ca?: string;
  /** Default: pino on stderr. */
  readonly logger?: Logger;
  /** Reported in hello; default: package.json's version. */
  readonly version?: string;
  /** Reported in hello; default: os.hostname(). */
  readonly hostname?: string;
  /** Sample interval until the master's welcome says otherwise (default 2000 ms). */
  readonly sampleIntervalMs?: number;
  readonly backoff?: BackoffOptions;
  /** How often cleanup receipts are polled (default 200 ms). */
  readonly cleanupPollMs?: number;
  /** Run tasks as this unprivileged user (`--run-as`, only with `--isolation none`; the worker must be root). */
  readonly runAs?: RunAs;
  /** How tasks are isolated (sandbox/setup.ts); default none, which the hello reports. */
  readonly sandbox?: SandboxSetup;
  /** How `container` tasks run (sandbox/setup.ts); absent: no engine, which the hello reports. */
  readonly containers?: ContainerTasks;
  /** Ping interval that finds a vanished master (default 10 s). */
  readonly pingIntervalMs?: number;
  /** How long after opening a socket the welcome may take before it is redialled (default 10 s). */
  readonly welcomeTimeoutMs?: number;
  /** How long the first hello waits for the first sample (default 3 s). */
  readonly firstSampleWaitMs?: number;
  /** Which finished execution directories are kept (executions/dir-retention.ts; default the last 200 or 3 days). */
  readonly executionRetention?: ExecutionRetention;
  /** How often finished execution directories are pruned (default hourly). */
  readonly executionPruneIntervalMs?: number;
  /** Bound of the input cache (`<dataDir>/input-cache`), in bytes (default 4 GiB). */
  readonly inputCacheBytes?: number;
  /** Named data mounts tasks may ask for (`--mount NAME=PATH[:rw]`). */
  readonly mounts?: readonly DataMount[];
  /**
   * `--backend slurm`: tasks run as Slurm jobs, the cards are the partition's GPU pool
   * (docs/decisions/0013-slurm-backend.md); `sampler` must then be `slurm.sampler`.
   */
  readonly slurm?: { readonly backend: SlurmBackend; readonly sampler: SlurmPoolSampler };
  /**
   * Every time value the worker uses (stored timestamps, sample times, deadlines, retention ages) comes
   * from here; default the system clock. Timers only decide when to look again.
   */
  readonly clock?: Clock;
}

/** A running worker. */
export interface RunningWorker {
  /** This process's boot id (the sequence its messages carry). */
  readonly bootId: string;
  readonly workerId: string;
  /** The sampler's provider. */
  readonly provider: Provider;
  /** Whether a session is live (socket open and welcome received). */
  isConnected(): boolean;
  /** The cards of the latest successful sample; null before the first one (e.g. the tool fails). */
  latestCards(): CardSample[] | null;
  /**
   * Clean stop: stops sampling, cancels running executions (SIGTERM, grace, SIGKILL) and reports them,
   * waits briefly for the master to acknowledge what is queued, closes the socket and the store.
   */
  close(): Promise<void>;
}

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
  let welcomed = false;
  let welcomeTimer: NodeJS.Timeout | undefined;
  const sendDirect = (message: WorkerMessage): void => {
    conn?.send(JSON.stringify(message));
  };
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
  const executionsDir = join(opts.dataDir, 'executions');
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
  const executor =
    opts.slurm === undefined
      ? localExecutor({
          rootDir: executionsDir,
          clock,
          workerId: opts.workerId,
          provider: opts.sampler.provider,
          inputs,
          ...(opts.cleanupPollMs === undefined ? {} : { cleanupPollMs: opts.cleanupPollMs }),
          ...(opts.runAs === undefined ? {} : { runAs: opts.runAs }),
          ...(opts.sandbox === undefined ? {} : { sandbox: opts.sandbox }),
          ...(opts.containers === undefined ? {} : { containers: opts.containers }),
          ...(opts.mounts === undefined ? {} : { mounts: opts.mounts }),
        })
      : slurmExecutor({
          backend: opts.slurm.backend,
          clock,
          workerId: opts.workerId,
          provider: opts.sampler.provider,
          inputs,
          ...(opts.mounts === undefined ? {} : { mounts: opts.mounts }),
          logger: log,
        });
  const executions = new ExecutionManager({
    store,
    outbox,
    logger: log,
    sampler: opts.sampler,
    latestCards: () => sampling.latestCards(),
    executor,
  });
  log.info(
    { isolation: opts.sandbox?.kind ?? 'none', container_engine: opts.containers?.setup.engine ?? null },
    opts.containers === undefined
      ? 'worker: no container engine; container tasks wait for a worker that has one'
      : `worker: container tasks run with ${opts.containers.setup.engine}`,
  );

  // 2. what the previous process left behind
  const recoveryAbort = new AbortController();
  const slurmDeps =
    opts.slurm === undefined
      ? null
      : { backend: opts.slurm.backend, store, outbox, executions, workerId: opts.workerId, logger: log };
  let fenceTimer: NodeJS.Timeout | undefined;
  if (slurmDeps !== null) {
    // Only jobs recorded in the store are this worker's when the pool is sampled.
    opts.slurm?.sampler.setOwnJobs(
      () =>
        new Set(store.listUnfinishedExecutions().flatMap((e) => (e.slurm === null ? [] : [e.slurm.job_id]))),
    );
    // Fencing on the cluster: stale broker jobs are scancelled every poll (slurm/recovery.ts).
    let fencing = false;
    fenceTimer = setInterval(
      () => {
        if (fencing) return;
        fencing = true;
        void fenceSlurmJobs(slurmDeps).finally(() => {
          fencing = false;
        });
      },
      Math.max(500, slurmDeps.backend.pollMs),
    );
    fenceTimer.unref();
  }
  const recovery =
    slurmDeps !== null
      ? recoverSlurmExecutions(slurmDeps)
      : recoverUnfinished({
          store,
          outbox,
          logger: log,
          sampler: opts.sampler,
          signal: recoveryAbort.signal,
          clock,
          ...(opts.containers === undefined ? {} : { containers: opts.containers.setup }),
          ...(opts.cleanupPollMs === undefined ? {} : { pollMs: opts.cleanupPollMs }),
        });

  // Finished execution directories: pruned now and then; the first pass waits for recovery.
  const pruneDirs = () => {
    try {
      pruneExecutionDirs(
        store,
        // A Slurm worker's execution directories are its job directories on the shared filesystem.
        opts.slurm?.backend.jobDir ?? executionsDir,
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

  const hello = () => ({
    type: 'hello' as const,
    protocol_version: PROTOCOL_VERSION,
    worker_id: opts.workerId,
    boot_id: bootId,
    version: opts.version ?? packageVersion(),
    hostname: (opts.hostname ?? osHostname()).slice(0, 255),
    provider: opts.sampler.provider,
    cards: sampling.currentCards(),
    executions: store.listKnownExecutions(HELLO_MAX_EXECUTIONS).map((e) => ({
      execution_id: e.execution_id,
      task_id: e.task_id,
      lease_epoch: e.lease_epoch,
      phase: e.phase,
      cards: e.plan.cards.map((c) => c.index),
    })),
    master_marks: store.listMasterMarks(),
    card_epochs: store.listCardEpochs(),
    isolation: opts.sandbox?.kind ?? 'none',
    container_engine: opts.containers?.setup.engine ?? null,
    mounts: (opts.mounts ?? []).map((m) => ({ name: m.name, read_only: m.read_only })),
    backend: opts.slurm === undefined ? ('local' as const) : ('slurm' as const),
    slurm: opts.slurm?.sampler.pool() ?? null,
  });

  const onWelcome = (msg: Extract<MasterMessage, { type: 'welcome' }>) => {
    clearTimeout(welcomeTimer);
    if (msg.worker_id !== opts.workerId)
      log.warn({ master_says: msg.worker_id }, 'worker: the master knows this worker under another id');
    sampling.setInterval(msg.sample_interval_ms);
    welcomed = true;
    conn?.resetBackoff();
    log.info(
      { master_boot_id: msg.master_boot_id, sample_interval_ms: msg.sample_interval_ms },
      'worker: welcomed by the master',
    );
    outbox.startSession(msg.worker_marks);
    if (msg.qualification_python !== undefined) probeOnce(msg.qualification_python);
  };

  // A hello makes the master forget the previous answer, so every session probes again (torch may have
  // been installed meanwhile); one probe at a time. The report sits in the outbox like any message, so
  // a session that drops before the ack resends it.
  let probing = false;
  const probeOnce = (python: string) => {
    if (probing) return; // its answer is sent after this welcome's hello, so it still counts
    probing = true;
    void probeInterpreter(python).then((result) => {
      probing = false;
      if (stopping) return;
      log.info(result, 'worker: qualification interpreter probed');
      outbox.enqueueLatest({ type: 'probe', ...result });
    });
  };

  let stopping = false;
  const sendReplies = (replies: readonly Reply[]) => {
    for (const r of replies) sendDirect(r);
  };
  const masterMarks = { raiseAbove: (bootId: string, seq: number) => store.raiseMasterMark(bootId, seq) };

  /** assign, cancel and query: applied at most once per (master boot, seq); see src/contracts/sequencing.ts. */
  const onSequenced = (msg: Extract<MasterMessage, { type: 'assign' | 'cancel' | 'query' }>) => {
    // Neither processed nor acknowledged while stopping: the master resends it to the next session.
    if (stopping) return;
    let after: (() => void) | undefined;
    const received = receiveSequenced(msg, {
      transaction: (fn) => store.transaction(fn),
      marks: masterMarks,
      apply: () => {
        const handled: Handled =
          msg.type === 'assign'
            ? executions.handleAssign(msg)
            : msg.type === 'cancel'
              ? executions.handleCancel(msg)
              : executions.handleQuery(msg);
        after = handled.after;
        return handled.error ?? null;
      },
    });
    if (received.kind === 'duplicate')
      log.debug({ type: msg.type, boot_id: msg.boot_id, seq: msg.seq }, 'worker: duplicate from the master');
    else if (received.refusal !== null)
      log.warn({ type: msg.type, seq: msg.seq, ...received.refusal }, 'worker: master message refused');
    sendReplies(received.replies);
    after?.();
  };

  // Set when a message could not be processed for an unexpected reason: the socket is dropped and
  // whatever is still buffered on it is ignored, so no later message raises the master's mark past the
  // failed one; after the reconnect the master resends everything unacknowledged, in order.
  let dropping = false;

  const onMessage = (text: string) => {
    if (dropping) return;
    const parsed = parseMessage(MasterMessageSchema, text);
    if (!parsed.ok) {
      // A typed refusal, never a crash; a poison sequenced message is acknowledged so that the master
      // does not resend it for ever.
      const bad = parsed.invalid;
      log.warn(
        { type: bad.type, seq: bad.poison?.seq ?? null, why: bad.message },
        'worker: invalid message from the master',
      );
      try {
        sendReplies(
          repliesToInvalid(bad, {
            acceptsPoison: true,
            recordPoison: (ref) => store.raiseMasterMark(ref.boot_id, ref.seq),
          }),
        );
      } catch (err) {
        log.error({ err: (err as Error)?.message }, 'worker: could not record an invalid message');
      }
      return;
    }
    const msg = parsed.message;
    try {
      switch (msg.type) {
        case 'welcome':
          onWelcome(msg);
          break;
        case 'ack':
          outbox.ack(msg.boot_id, msg.seq);
          break;
        case 'error':
          log.warn(
            { code: msg.code, ref_seq: msg.ref_seq, message: msg.message },
            'worker: error from the master',
          );
          break;
        default:
          onSequenced(msg);
      }
    } catch (err) {
      // A bug or a broken store must not take the worker down. Nothing was acknowledged: drop the session
      // so that the master resends this message (and everything after it) on the next one.
      log.error(
        { err: (err as Error)?.stack ?? String(err), type: msg.type },
        'worker: message handling failed',
      );
      sendDirect({
        type: 'error',
        code: 'INTERNAL',
        message: `worker could not process ${msg.type}: ${(err as Error)?.message ?? String(err)}`.slice(
          0,
          4096,
        ),
        ...('seq' in msg ? { ref_seq: msg.seq } : {}),
      });
      if ('seq' in msg) {
        dropping = true;
        conn?.drop(`could not process ${msg.type} seq ${msg.seq}`);
      }
    }
  };

  // 4. connect
  conn = connectForever({
    url,
    token: opts.token,
    ...(opts.ca === undefined ? {} : { ca: opts.ca }),
    logger: log,
    ...(opts.backoff === undefined ? {} : { backoff: opts.backoff }),
    ...(opts.pingIntervalMs === undefined ? {} : { pingIntervalMs: opts.pingIntervalMs }),
    onOpen: () => {
      dropping = false;
      sendDirect(hello());
      welcomeTimer = setTimeout(
        () => conn?.drop('no welcome from the master'),
        opts.welcomeTimeoutMs ?? DEFAULT_WELCOME_TIMEOUT_MS,
      );
    },
    onMessage,
    onClose: () => {
      clearTimeout(welcomeTimer);
      welcomed = false;
      outbox.endSession();
    },
  });

  let closing: Promise<void> | null = null;
  return {
    bootId,
    workerId: opts.workerId,
    provider: opts.sampler.provider,
    isConnected: () => welcomed && conn?.isOpen() === true,
    latestCards: () => sampling.latestCards(),
    close() {
      closing ??= (async () => {
        stopping = true;
        clearInterval(pruneTimer);
        clearInterval(fenceTimer);
        log.info({ running: executions.runningCount() }, 'worker: stopping');
        sampling.stop();
        recoveryAbort.abort();
        await executions.stopAll();
        await recovery;
        const flushEnd = clock.now() + FLUSH_WAIT_MS;
        while (welcomed && outbox.hasUnacked() && clock.now() < flushEnd) await sleep(20);
        clearTimeout(welcomeTimer);
        await conn?.close();
        store.close();
        log.info('worker: stopped');
      })();
      return closing;
    },
  };
}

let cachedVersion: string | undefined;

function packageVersion(): string {
  if (cachedVersion === undefined) {
    try {
      const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as {
        version?: unknown;
      };
      cachedVersion = typeof pkg.version === 'string' ? pkg.version.slice(0, 64) : 'unknown';
    } catch {
      cachedVersion = 'unknown';
    }
  }
  return cachedVersion;
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
