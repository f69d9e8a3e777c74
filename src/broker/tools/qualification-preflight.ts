import { basename } from 'node:path';
import { BrokerError } from '../../contracts/errors.js';
import type { CardSample } from '../../contracts/sample.js';
import type { WorkerRecord } from '../../store/workers-repo.js';
import type { BrokerDeps } from '../deps.js';

/**
 * What start_qualification refuses before anything is cordoned (docs/qualification.md "What happens",
 * step 1): a worker whose interpreter cannot import torch, and a Slurm pool that is not idle.
 */

/**
 * The preflight (docs/operations.md): a worker that reported its qualification interpreter cannot import
 * torch is refused before anything is cordoned. A worker that has not reported yet (an older worker, or
 * one whose probe is still running) is let through: a failed rung then shows the same cause.
 */
export function assertInterpreterReady(deps: BrokerDeps, worker: WorkerRecord): void {
  const probe = worker.qualification_probe;
  const python = deps.config.qualification_python;
  if (probe === null || probe.python !== python || probe.torch_version !== null) return;
  throw new BrokerError(
    'INVALID_STATE',
    `${basename(python)} on worker ${worker.id} cannot import torch: apt-get install python3-torch, or set qualification_python`,
    `${python} said: ${probe.error ?? 'no reason given'}. Nothing was cordoned; restart that worker once torch imports there (it probes on each connection) and qualify again.`,
    { reason: 'QUALIFICATION_PYTHON_UNUSABLE', python, error: probe.error },
  );
}

/**
 * A Slurm pool is qualified idle (ADR 0017): Slurm, not the broker, decides which GPUs a rung gets, so
 * a run that shared the partition with a broker lease or someone else's job would measure whatever GPUs
 * were left and could pend behind them. Refused before anything is cordoned.
 */
export function assertPoolIdle(deps: BrokerDeps, workerId: string, live: readonly CardSample[]): void {
  const leases = deps.store.leases.liveLeases().filter((l) => l.worker_id === workerId);
  const foreign = live.filter((c) => c.processes.length > 0);
  if (leases.length === 0 && foreign.length === 0) return;
  const held = [
    leases.length > 0
      ? `${leases.length} broker lease(s) (tasks ${leases.map((l) => l.task_id).join(', ')})`
      : '',
    foreign.length > 0
      ? `${foreign.length} GPU(s) used by other Slurm jobs (${[...new Set(foreign.flatMap((c) => c.processes.map((p) => p.name)))].join(', ')})`
      : '',
  ].filter(Boolean);
  throw new BrokerError(
    'INVALID_STATE',
    `the Slurm pool of ${workerId} is not idle: ${held.join('; ')}`,
    'A Slurm pool is qualified as a whole, with no other job on its partition: wait until those jobs end (squeue -p PARTITION), or drain the partition for the run, then qualify again.',
    { reason: 'POOL_NOT_IDLE', leases: leases.length, foreign_gpus: foreign.length },
  );
}
