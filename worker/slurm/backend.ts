import type { Logger } from 'pino';
import type { SlurmJobReport } from '../../src/contracts/worker-protocol.js';
import type { Clock } from '../../src/platform/clock.js';
import type { SandboxSetup } from '../sandbox/setup.js';
import type { ExecutorProvider } from '../task-io/env.js';
import type { InputSource } from '../task-io/inputs.js';
import type { LogChunkHandler } from '../task-io/logs.js';
import type { DataMount } from '../task-io/mounts.js';
import type { SlurmDriver } from './cli/driver.js';
import type { PoolGres } from './cli/gres.js';

/**
 * What a Slurm worker is configured with (docs/decisions/0013-slurm-backend.md): the operator's fixed
 * settings and the options of one Slurm execution, shared by the executor (executor.ts), its job setup
 * (job-setup.ts) and recovery (recovery.ts).
 */

/** The operator's fixed Slurm settings (`gpu-broker worker --backend slurm`). */
export interface SlurmBackend {
  readonly driver: SlurmDriver;
  readonly partition: string;
  readonly account?: string | undefined;
  readonly qos?: string | undefined;
  /** Operator-fixed sbatch arguments; agents cannot change them. */
  readonly extraArgs: readonly string[];
  /** Shared directory (visible on the compute nodes) holding one directory per execution. */
  readonly jobDir: string;
  /** How often jobs and nodes are polled (ms). */
  readonly pollMs: number;
  /**
   * Run every rank in bwrap on its node (docs/decisions/0018-slurm-sandbox.md); null: `--isolation none`,
   * the task runs as the job's user with what the site's Slurm confines.
   */
  readonly sandbox: SlurmSandbox | null;
  /**
   * What the pool sampler last learnt of the GRES (sampler.ts PoolGres): which type to ask for a lease's
   * cards (`--gres=gpu:<profile>:N` for MIG slices) and each node's device files by position, for the
   * ranks to bind. Absent or null (no sample yet): untyped `--gres=gpu:N`, `<gpuDevDir>/nvidia<i>`.
   */
  readonly gres?: (() => PoolGres | null) | undefined;
}

/** A Slurm worker's sandbox: the local worker's bwrap setup, plus where the nodes' GPU device files are. */
export interface SlurmSandbox {
  readonly setup: Extract<SandboxSetup, { kind: 'bwrap' }>;
  /** gres.conf's `File=` directory for `nvidia<index>` (`%n`: the node's name); default /dev. */
  readonly gpuDevDir: string;
  /** `nvidia` device files, or Hygon's (`hy`: dri/renderD<128+i> and kfd); default nvidia. */
  readonly gpuKind?: 'nvidia' | 'hy';
}

/** Options of one Slurm execution. */
export interface SlurmExecutionOptions {
  readonly backend: SlurmBackend;
  /** The daemon's clock: the broker's time limit is decided by it (polls only wake to look). */
  readonly clock: Clock;
  readonly workerId: string;
  readonly provider: ExecutorProvider;
  readonly onLog: LogChunkHandler;
  /**
   * Log bytes (both streams together) the worker forwards per task, and the most each of the job's own
   * stdout.log and stderr.log keeps on the shared file system; default DEFAULT_MAX_LOG_BYTES_PER_TASK.
   */
  readonly maxLogBytes?: number;
  /** Records and reports the job: `accepted` after sbatch or a pending reason change, `started` with the binding. */
  readonly onJob: (report: SlurmJobReport, phase: 'accepted' | 'started') => void;
  /** Where the spec's inputs are fetched from (the master, through the cache). */
  readonly inputs?: InputSource;
  /** The named data mounts the operator declared (`--mount`; paths the compute nodes share). */
  readonly mounts?: readonly DataMount[];
  /** A job a previous worker process submitted: resume it instead of submitting. */
  readonly resume?: SlurmJobReport;
  readonly logger?: Logger;
}
