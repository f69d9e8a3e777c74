import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkWorkloadResult,
  type WorkloadExpectation,
} from '../../../qualification/verify/workload-checks.js';
import { WORKLOAD_RESULT_FILE } from '../../../qualification/workload/location.js';
import { runWorkload } from '../../support/workload.js';

/**
 * The real workload as a Slurm job's copies run it (one per node, started by the job wrapper with
 * NODE_RANK / WORLD_SIZE = nodes / MASTER_ADDR / MASTER_PORT and Slurm's SLURM_JOB_GPUS): two copies on
 * this host play two nodes of 2 GPUs, start their local ranks, meet at the rendezvous with real
 * torch.distributed (gloo on CPU, simulated cards) and rank 0 writes one document for all 4 ranks.
 * Without Slurm: the Slurm integration tests run the same through sbatch.
 */

/**
 * What a Slurm worker's sandboxed rank gives a copy: GPU_BROKER_BACKEND=slurm, the node's physical GPU
 * ids in GPU_BROKER_GPU_IDS and CUDA_VISIBLE_DEVICES numbered from 0 (worker/slurm/cli/job-wrapper.ts).
 */
function slurmEnv(out: string, node: string, nodeRank: number, nodes: number, gpus: string, port: number) {
  return {
    GPU_BROKER_TASK_ID: 'task-s',
    GPU_BROKER_EXECUTION_ID: 'exec-s',
    GPU_BROKER_ASSIGNMENT_ID: 'asg-s',
    GPU_BROKER_LEASE_EPOCH: '9',
    GPU_BROKER_WORKER_ID: 'slurm-pool',
    GPU_BROKER_OUTPUT_DIR: out,
    GPU_BROKER_SIMULATED: '1',
    GPU_BROKER_BACKEND: 'slurm',
    GPU_BROKER_GPU_IDS: gpus,
    SLURM_JOB_ID: '777',
    SLURMD_NODENAME: node,
    SLURM_JOB_GPUS: gpus,
    CUDA_VISIBLE_DEVICES: gpus
      .split(',')
      .map((_, i) => String(i))
      .join(','),
    NODE_RANK: String(nodeRank),
    WORLD_SIZE: String(nodes),
    MASTER_ADDR: '127.0.0.1',
    MASTER_PORT: String(port),
  };
}

function expectation(): WorkloadExpectation {
  return {
    task_id: 'task-s',
    execution_id: 'exec-s',
    assignment_id: 'asg-s',
    lease_epoch: 9,
    gpu_ids: [0, 1, 2, 3],
    worker_id: 'slurm-pool',
    simulated: true,
    slurm: {
      job_id: '777',
      nodes: [
        { node: 'n1', gpus: [2, 3] },
        { node: 'n2', gpus: [0, 1] },
      ],
      per_node: 2,
    },
  };
}

describe('qualification workload in a Slurm job (real script, two copies as two nodes, gloo)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gpu-broker-qualify-slurm-'));
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('two nodes × 2 ranks meet at MASTER_ADDR:MASTER_PORT; the document records the job and every rank’s node', async () => {
    const out = join(dir, 'two-nodes');
    // A port from the wrapper's range, varied by pid so parallel runs of this file do not collide.
    const port = 20000 + (process.pid % 10000);
    const [first, second] = await Promise.all([
      runWorkload(slurmEnv(out, 'n1', 0, 2, '2,3', port)),
      runWorkload(slurmEnv(out, 'n2', 1, 2, '0,1', port)),
    ]);
    expect(first.code, first.stderr).toBe(0);
    expect(second.code, second.stderr).toBe(0);
    expect(first.stdout).toContain('slurm_job=777 node=n1 node_rank=0/2 gpus=[2, 3]');
    expect(second.stdout).toContain("this node's ranks finished");
    const doc = JSON.parse(readFileSync(join(out, WORKLOAD_RESULT_FILE), 'utf8')) as Record<string, unknown>;
    expect(doc).toMatchObject({
      world_size: 4,
      gpu_ids: [],
      simulated: true,
      backend: 'gloo',
      slurm: {
        job_id: '777',
        nodes: [
          // In its sandbox a rank sees its node's GPUs numbered from 0; the physical ids stay in gpus.
          { node: 'n1', gpus: [2, 3], cuda_visible_devices: '0,1' },
          { node: 'n2', gpus: [0, 1], cuda_visible_devices: '0,1' },
        ],
      },
    });
    const checks = checkWorkloadResult(doc, expectation());
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    expect(checks.find((c) => c.name === 'allreduce.sum')?.detail).toBe('4 rank(s) ok');
    // The same document judged against another recorded job fails, by name.
    const other = checkWorkloadResult(doc, {
      ...expectation(),
      slurm: { ...expectation().slurm!, job_id: '778' },
    });
    expect(other.filter((c) => !c.ok).map((c) => c.name)).toEqual(['slurm.job_id']);
  });

  it('refuses a Slurm job without the wrapper’s variables (no defaults are guessed)', async () => {
    const out = join(dir, 'bare');
    const env: Record<string, string> = slurmEnv(out, 'n1', 0, 1, '0', 1);
    delete env['NODE_RANK'];
    const r = await runWorkload(env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /NODE_RANK is not set: in a Slurm job this script must be started by the gpu-broker job wrapper/,
    );
  });
});
