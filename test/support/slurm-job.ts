import type { SlurmJob, SlurmSubmitRequest } from '../../worker/slurm/cli/types.js';

/** The fields every sbatch request names besides its resources: a job t1's script, name, logs and dir. */
export const SUBMIT_BASE: SlurmSubmitRequest = {
  scriptPath: '/j/job.sh',
  jobName: 'gb-t1',
  comment: 'c',
  stdout: '/j/o',
  stderr: '/j/e',
  chdir: '/j',
};

/** A job as the Slurm driver reports it: one RUNNING 1-GPU job on node n1, with `over` applied. */
export function slurmJob(id: string, over: Partial<SlurmJob> = {}): SlurmJob {
  return {
    id,
    name: `gpu-broker-${id}`,
    comment: null,
    user: 'root',
    partition: 'gpu',
    account: null,
    state: 'RUNNING',
    rawState: 'RUNNING',
    reason: null,
    exitCode: null,
    signal: null,
    nodes: ['n1'],
    gpus: [{ node: 'n1', indices: [0] }],
    gpusPerNode: 1,
    numNodes: 1,
    submitTime: null,
    startTime: null,
    endTime: null,
    timeLimitSeconds: 60,
    workDir: null,
    stdout: null,
    stderr: null,
    batchHost: 'n1',
    ...over,
  } as SlurmJob;
}
