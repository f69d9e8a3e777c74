import type { Logger } from 'pino';
import type { CardSample, Provider } from '../../src/contracts/sample.js';
import type { HostResources } from '../../src/contracts/task-limits.js';
import type { Clock } from '../../src/platform/clock.js';
import type { ExecutionRetention } from '../executions/dir-retention.js';
import type { BackoffOptions } from '../link/connection.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import type { ContainerTasks } from '../sandbox/container.js';
import type { RunAs } from '../sandbox/run-as.js';
import type { SandboxSetup } from '../sandbox/setup.js';
import type { SlurmBackend } from '../slurm/backend.js';
import type { SlurmPoolSampler } from '../slurm/sampler.js';
import type { DataMount } from '../task-io/mounts.js';

/** What `startWorker` (start-worker.ts) is started with, and what it returns. */

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
   * The host's resources the hello reports (docs/security.md "The task sandbox"); default: this host's (hello.ts
   * `hostResources`). Tests set a small host here; null reports none.
   */
  readonly hostResources?: HostResources | null;
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
