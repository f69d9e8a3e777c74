import type { Logger } from 'pino';
import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import type { Clock } from '../../src/platform/clock.js';
import type { BackendRef, ExecutionHooks, Executor } from '../executions/executor.js';
import type { ExecutionManager } from '../executions/manager.js';
import type { OutboxSender } from '../link/outbox.js';
import { type ExecutorOptions, startExecution } from '../local/executor.js';
import { processIdentity } from '../local/process-group.js';
import { recoverUnfinished } from '../local/recovery.js';
import { sweepStale } from '../sandbox/sweep-stale.js';
import { unmountStale } from '../sandbox/task-fs.js';
import type { SlurmExecutionOptions } from '../slurm/backend.js';
import { startSlurmExecution } from '../slurm/executor.js';
import { startSlurmUpkeep } from '../slurm/recovery.js';
import type { LocalStore } from '../store/local-store.js';
import type { InputSource } from '../task-io/inputs.js';
import type { HelloFacts } from './hello.js';
import type { WorkerOptions } from './options.js';

/**
 * The two bindings of the Executor port (executions/executor.ts): the daemon picks one at start, with
 * this worker's settings, so the execution manager knows neither executor.
 */

/** The local executor (local/executor.ts): each plan runs as a process group (or container) on this host. */
export function localExecutor(
  opts: Omit<ExecutorOptions, 'onLog' | 'checkCardsClean' | 'maxLogBytes'>,
): Executor {
  return {
    start: (plan, hooks) =>
      startExecution(plan, {
        ...opts,
        onLog: hooks.onLog,
        maxLogBytes: hooks.maxLogBytes,
        ...(hooks.checkCardsClean === undefined ? {} : { checkCardsClean: hooks.checkCardsClean }),
      }),
    identify: processIdentity,
  };
}

/**
 * The Slurm executor (slurm/executor.ts, `--backend slurm`): each plan runs as a batch job. The job's
 * news is recorded with the execution in `store` (its Slurm report) before the manager reports it; a job
 * a previous worker process submitted is resumed by its report instead of submitted again.
 */
export function slurmExecutor(
  opts: Omit<SlurmExecutionOptions, 'onLog' | 'onJob' | 'resume' | 'maxLogBytes'>,
  store: Pick<LocalStore, 'setExecutionSlurm'>,
): Executor {
  const run = (plan: ExecutionPlan, hooks: ExecutionHooks, resume?: BackendRef) =>
    startSlurmExecution(plan, {
      ...opts,
      onLog: hooks.onLog,
      maxLogBytes: hooks.maxLogBytes,
      onJob: (report, phase) => {
        const moved = hooks.onProgress(phase, () => store.setExecutionSlurm(plan.execution_id, report));
        if (moved)
          opts.logger?.info(
            { execution_id: plan.execution_id, job_id: report.job_id, binding: report.binding },
            'worker: Slurm job started',
          );
      },
      ...(resume === undefined ? {} : { resume }),
    });
  return {
    start: (plan, hooks) => run(plan, hooks),
    resume: (plan, ref, hooks) => run(plan, hooks, ref),
  };
}

/** What start-up hands the binding. */
export interface BindingContext {
  readonly opts: WorkerOptions;
  /** `<dataDir>/executions`: where the local executor makes each execution's directory. */
  readonly executionsDir: string;
  readonly clock: Clock;
  readonly inputs: InputSource;
  readonly store: LocalStore;
  readonly outbox: OutboxSender;
  readonly logger: Logger;
}

/** The worker's backend as the daemon sees it: the one place that tells a local worker from a Slurm one. */
export interface BackendBinding {
  readonly executor: Executor;
  /** Where the execution directories are (a Slurm worker's are its job directories on the shared filesystem). */
  readonly executionsRoot: string;
  /** What the hello says of the backend. */
  readonly backend: HelloFacts['backend'];
  /** A Slurm worker's pool for the hello; null on a local worker. */
  pool(): HelloFacts['slurm'];
  /**
   * Once the execution manager exists: recovery of what a previous process left (never rejects; a local
   * one ends early on `signal`), and what the backend keeps doing until `stop` (Slurm fencing).
   */
  startUpkeep(executions: ExecutionManager, signal: AbortSignal): { recovery: Promise<void>; stop(): void };
}

/** What a crashed process left (sandbox/sweep-stale.ts), swept once recovery has stopped its executions. */
async function sweepAfterCrash(ctx: BindingContext): Promise<void> {
  const sandbox = ctx.opts.sandbox;
  // Task dirs' own file systems a killed worker left mounted come off first (task-fs.ts).
  if (sandbox?.kind === 'bwrap' && sandbox.taskFs != null) {
    const unmounted = await unmountStale(sandbox.taskFs, ctx.executionsDir, {
      known: (id) => ctx.store.getExecution(id) !== null,
      running: () => new Set(ctx.store.listUnfinishedExecutions().map((e) => e.execution_id)),
    });
    if (unmounted.length > 0)
      ctx.logger.info(
        { task_dirs: unmounted },
        'worker: unmounted the file systems of task dirs a previous process left',
      );
  }
  await sweepStale({
    cgroups: sandbox?.kind === 'bwrap' ? (sandbox.cgroups ?? null) : null,
    executionsDir: ctx.executionsDir,
    known: (id) => ctx.store.getExecution(id) !== null,
    running: () => new Set(ctx.store.listUnfinishedExecutions().map((e) => e.execution_id)),
    logger: ctx.logger,
  }).catch((err: unknown) => ctx.logger.warn({ err }, 'worker: sweeping stale task cgroups and dirs failed'));
}

/** Binds the Executor port and the backend's upkeep: Slurm jobs with `--backend slurm`, else this host. */
export function bindBackend(ctx: BindingContext): BackendBinding {
  const { opts, clock, store, outbox, logger } = ctx;
  const slurm = opts.slurm;
  if (slurm === undefined)
    return {
      executor: localExecutor({
        rootDir: ctx.executionsDir,
        clock,
        workerId: opts.workerId,
        provider: opts.sampler.provider,
        inputs: ctx.inputs,
        ...(opts.cleanupPollMs === undefined ? {} : { cleanupPollMs: opts.cleanupPollMs }),
        ...(opts.runAs === undefined ? {} : { runAs: opts.runAs }),
        ...(opts.sandbox === undefined ? {} : { sandbox: opts.sandbox }),
        ...(opts.containers === undefined ? {} : { containers: opts.containers }),
        ...(opts.mounts === undefined ? {} : { mounts: opts.mounts }),
      }),
      executionsRoot: ctx.executionsDir,
      backend: 'local',
      pool: () => null,
      startUpkeep: (_executions, signal) => ({
        recovery: recoverUnfinished({
          store,
          outbox,
          logger,
          sampler: opts.sampler,
          signal,
          clock,
          ...(opts.containers === undefined ? {} : { containers: opts.containers.setup }),
          ...(opts.cleanupPollMs === undefined ? {} : { pollMs: opts.cleanupPollMs }),
        }).then(() => sweepAfterCrash(ctx)),
        stop: () => undefined,
      }),
    };
  return {
    executor: slurmExecutor(
      {
        backend: slurm.backend,
        clock,
        workerId: opts.workerId,
        provider: opts.sampler.provider,
        inputs: ctx.inputs,
        ...(opts.mounts === undefined ? {} : { mounts: opts.mounts }),
        logger,
      },
      store,
    ),
    executionsRoot: slurm.backend.jobDir,
    backend: 'slurm',
    pool: () => slurm.sampler.pool(),
    startUpkeep: (executions) =>
      startSlurmUpkeep(
        { backend: slurm.backend, store, outbox, executions, workerId: opts.workerId, logger },
        slurm.sampler,
      ),
  };
}
