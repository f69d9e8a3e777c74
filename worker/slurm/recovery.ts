import type { Logger } from 'pino';
import { errorMessage } from '../../src/platform/error-message.js';
import type { ExecutionManager } from '../executions/manager.js';
import { phaseBody } from '../executions/reports.js';
import type { OutboxSender } from '../link/outbox.js';
import type { ExecutionSummary, LocalStore } from '../store/local-store.js';
import type { SlurmBackend } from './backend.js';
import type { SlurmJob } from './cli/types.js';
import { jobIsLive } from './executor.js';
import { markerPrefix } from './job-setup.js';
import type { SlurmPoolSampler } from './sampler.js';

/**
 * What a Slurm worker does besides running executions (docs/decisions/0013-slurm-backend.md):
 *
 *  - recovery at start-up: every execution a previous worker process left unfinished is resumed by its
 *    Slurm job id (recorded in the local store), or found by its comment marker when the process died
 *    between sbatch and recording the id; one that never reached Slurm is reported lost (exited
 *    WORKER_LOST, then cleaned: it holds no GPU);
 *  - fencing on the cluster, every poll: a live job carrying this worker's marker whose execution the
 *    store does not know, has finished, or is bound to another job id, is scancelled.
 */

/** Finished phases: a job of such an execution must not run. */
const FINISHED = new Set(['rejected', 'cleaned', 'cleanup_failed']);

/** What recovery and fencing need. */
export interface SlurmDaemonDeps {
  readonly backend: SlurmBackend;
  readonly store: LocalStore;
  readonly outbox: OutboxSender;
  readonly executions: ExecutionManager;
  readonly workerId: string;
  readonly logger: Logger;
}

/** This worker's live jobs on the partition, by execution id (the part of the marker after the prefix). */
async function ownJobs(deps: SlurmDaemonDeps): Promise<Map<string, SlurmJob[]>> {
  const prefix = markerPrefix(deps.workerId);
  const out = new Map<string, SlurmJob[]>();
  for (const job of await deps.backend.driver.jobs(deps.backend.partition)) {
    if (!job.comment?.startsWith(prefix) || !jobIsLive(job)) continue;
    const id = job.comment.slice(prefix.length);
    out.set(id, [...(out.get(id) ?? []), job]);
  }
  return out;
}

/** Resumes or accounts for every unfinished execution (see the module comment). Never throws. */
export async function recoverSlurmExecutions(deps: SlurmDaemonDeps): Promise<void> {
  const { store, outbox, logger, executions } = deps;
  let jobs: Map<string, SlurmJob[]> | null = null;
  try {
    jobs = await ownJobs(deps);
  } catch (err) {
    logger.warn(
      { err: errorMessage(err) },
      'worker: cannot list Slurm jobs for recovery; resuming by recorded id only',
    );
  }
  for (const record of store.listUnfinishedExecutions()) {
    const id = record.execution_id;
    const found = jobs?.get(id)?.[0];
    const report =
      record.slurm ??
      (found === undefined
        ? null
        : { job_id: found.id, state: found.state, pending_reason: found.reason, binding: null });
    if (report !== null) {
      logger.info(
        { execution_id: id, job_id: report.job_id, phase: record.phase },
        'worker: resuming a Slurm job',
      );
      if (record.slurm === null) store.setExecutionSlurm(id, report);
      executions.resume(record, report);
      continue;
    }
    if (jobs === null) continue; // cannot tell yet; the next worker process tries again
    logger.warn(
      { execution_id: id, phase: record.phase },
      'worker: an execution never reached Slurm; reporting it lost',
    );
    const result: ExecutionSummary = {
      exit_code: null,
      signal: null,
      failure_reason: record.result?.failure_reason ?? 'WORKER_LOST',
      outputs: record.result?.outputs ?? [],
      detail: 'worker restarted before its Slurm job was submitted',
    };
    // Each move is compare-and-set on the phase the previous process recorded (ADR 0014).
    const { phase } = record;
    store.transaction(() => {
      if (phase === 'accepted' || phase === 'started')
        outbox.enqueue(phaseBody(store.moveExecution(id, phase, 'exited', result)));
      outbox.enqueue(
        phaseBody(
          store.moveExecution(id, 'exited', 'cleaned', {
            ...result,
            cleaned: true,
            detail: 'no Slurm job exists for it',
          }),
        ),
      );
    });
  }
}

/** What a Slurm worker keeps doing beside its executions; `stop` ends it. */
export interface SlurmUpkeep {
  /** Recovery of what a previous process left (recoverSlurmExecutions); never rejects. */
  readonly recovery: Promise<void>;
  /** Stops the fencing timer. */
  stop(): void;
}

/**
 * Starts a Slurm worker's own duties (see the module comment): the pool sampler counts only the jobs
 * recorded in the store as this worker's, fencing runs every poll (one pass at a time), and recovery
 * begins.
 */
export function startSlurmUpkeep(deps: SlurmDaemonDeps, sampler: SlurmPoolSampler): SlurmUpkeep {
  const { store } = deps;
  // Only jobs recorded in the store are this worker's when the pool is sampled.
  sampler.setOwnJobs(
    () =>
      new Set(store.listUnfinishedExecutions().flatMap((e) => (e.slurm === null ? [] : [e.slurm.job_id]))),
  );
  // Fencing on the cluster: stale broker jobs are scancelled every poll.
  let fencing = false;
  const fenceTimer = setInterval(
    () => {
      if (fencing) return;
      fencing = true;
      void fenceSlurmJobs(deps).finally(() => {
        fencing = false;
      });
    },
    Math.max(500, deps.backend.pollMs),
  );
  fenceTimer.unref();
  return { recovery: recoverSlurmExecutions(deps), stop: () => clearInterval(fenceTimer) };
}

/** One fencing pass (see the module comment); returns the job ids it scancelled. Never throws. */
export async function fenceSlurmJobs(deps: SlurmDaemonDeps): Promise<string[]> {
  const cancelled: string[] = [];
  let jobs: Map<string, SlurmJob[]>;
  try {
    jobs = await ownJobs(deps);
  } catch (err) {
    deps.logger.warn({ err: errorMessage(err) }, 'worker: cannot list Slurm jobs for fencing');
    return cancelled;
  }
  for (const [executionId, list] of jobs) {
    let record: ReturnType<LocalStore['getExecution']>;
    try {
      record = deps.store.getExecution(executionId);
    } catch {
      return cancelled; // the store closed under this pass (the worker is stopping)
    }
    for (const job of list) {
      const why =
        record === null
          ? 'its execution is unknown to this worker'
          : FINISHED.has(record.phase)
            ? `its execution is ${record.phase}`
            : record.slurm !== null && record.slurm.job_id !== job.id
              ? `its execution is bound to job ${record.slurm.job_id}`
              : null;
      if (why === null) continue;
      deps.logger.warn(
        { job_id: job.id, execution_id: executionId, why },
        'worker: scancelling a stale broker job',
      );
      try {
        await deps.backend.driver.cancel(job.id);
        cancelled.push(job.id);
      } catch (err) {
        deps.logger.warn({ job_id: job.id, err: errorMessage(err) }, 'worker: scancel of a stale job failed');
      }
    }
  }
  return cancelled;
}
