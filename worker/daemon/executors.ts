import type { Executor } from '../executions/executor.js';
import { type ExecutorOptions, startExecution } from '../local/executor.js';
import type { SlurmExecutionOptions } from '../slurm/backend.js';
import { startSlurmExecution } from '../slurm/executor.js';

/**
 * The two bindings of the Executor port (executions/executor.ts): the daemon picks one at start, with
 * this worker's settings, so the execution manager knows neither executor.
 */

/** The local executor (local/executor.ts): each plan runs as a process group (or container) on this host. */
export function localExecutor(opts: Omit<ExecutorOptions, 'onLog' | 'checkCardsClean'>): Executor {
  return {
    start: (plan, hooks) =>
      startExecution(plan, {
        ...opts,
        onLog: hooks.onLog,
        ...(hooks.checkCardsClean === undefined ? {} : { checkCardsClean: hooks.checkCardsClean }),
      }),
  };
}

/** The Slurm executor (slurm/executor.ts, `--backend slurm`): each plan runs as a batch job. */
export function slurmExecutor(opts: Omit<SlurmExecutionOptions, 'onLog' | 'onJob' | 'resume'>): Executor {
  return {
    start: (plan, hooks) =>
      startSlurmExecution(plan, {
        ...opts,
        onLog: hooks.onLog,
        onJob: hooks.onJob,
        ...(hooks.resume === undefined ? {} : { resume: hooks.resume }),
      }),
  };
}
