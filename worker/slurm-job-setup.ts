import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { ExecutionPlan } from '../src/contracts/worker-protocol.js';
import { buildTaskEnv } from './executor-env.js';
import { jobFiles, writeJobFiles } from './slurm/job-wrapper.js';
import type { SlurmSubmitRequest } from './slurm/types.js';
import type { SlurmExecutionOptions } from './slurm-executor.js';

const SAFE_SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;

/** The `--comment` marker of this worker's jobs: `gpu-broker:<worker>:<execution>`. */
export function jobMarker(workerId: string, executionId: string): string {
  return `${markerPrefix(workerId)}${executionId}`;
}

/** What every job of this worker's comment starts with (the worker id reduced to the marker's alphabet). */
export function markerPrefix(workerId: string): string {
  return `gpu-broker:${workerId.replace(/[^A-Za-z0-9._@%+-]/g, '_').slice(0, 100)}:`;
}

/**
 * Step 1 of a Slurm execution: refuses what a Slurm job cannot honour (container runtime, inputs,
 * named mounts), writes the job wrapper and the task's directories, builds the env from nothing, and
 * returns the sbatch request — or why the plan cannot run as a Slurm job.
 */
export async function prepareSlurmJob(
  plan: ExecutionPlan,
  opts: Pick<SlurmExecutionOptions, 'backend' | 'workerId' | 'provider'>,
  execDir: string,
): Promise<SlurmSubmitRequest | string> {
  const { backend } = opts;
  const id = plan.execution_id;
  if (!SAFE_SEGMENT.test(id) || id.length > 128)
    return `execution id ${JSON.stringify(id)} is not usable as a directory name`;
  const runtime = plan.spec.runtime;
  if (runtime.kind !== 'process')
    return `runtime kind ${runtime.kind} is not supported by a Slurm worker; run a process task`;
  if ((plan.spec.inputs ?? []).length > 0)
    return 'inputs are not supported by a Slurm worker yet: reference files on the shared filesystem';
  if ((plan.spec.mounts ?? []).length > 0)
    return 'named mounts are not supported by a Slurm worker: the job sees the cluster filesystem';
  const perNode = plan.spec.cards.per_node ?? plan.spec.cards.count;
  const nodes = Math.max(1, Math.round(plan.spec.cards.count / perNode));
  const taskDir = join(execDir, 'task');
  try {
    await mkdir(backend.jobDir, { recursive: true, mode: 0o700 });
    await writeJobFiles({ jobDir: execDir, argv: [...runtime.argv], ntasksPerNode: 1 });
    await mkdir(taskDir, { mode: 0o700 });
    await mkdir(join(taskDir, 'out'), { mode: 0o700 });
    await mkdir(join(taskDir, 'tmp'), { mode: 0o700 });
  } catch (err) {
    return `cannot prepare the job directory ${execDir}: ${describe(err)}`;
  }
  const env = buildTaskEnv(
    plan,
    { execDir: taskDir, outputDir: join(taskDir, 'out'), tmpDir: join(taskDir, 'tmp') },
    opts.workerId,
    opts.provider,
  );
  // The lease's indexes are pool slots, not devices: Slurm sets the visible devices itself.
  for (const k of [
    'CUDA_VISIBLE_DEVICES',
    'HIP_VISIBLE_DEVICES',
    'ROCR_VISIBLE_DEVICES',
    'GPU_BROKER_GPU_IDS',
    'GPU_BROKER_GPU_UUIDS',
  ])
    delete env[k];
  const files = jobFiles(execDir);
  return {
    scriptPath: files.script,
    jobName: `gpu-broker-${id}`.slice(0, 200),
    comment: jobMarker(opts.workerId, id),
    partition: backend.partition,
    ...(backend.account === undefined ? {} : { account: backend.account }),
    ...(backend.qos === undefined ? {} : { qos: backend.qos }),
    gpusPerNode: perNode,
    nodes,
    ntasksPerNode: 1,
    timeLimitSeconds: plan.spec.time_limit_seconds,
    stdout: files.stdout,
    stderr: files.stderr,
    chdir: taskDir,
    env,
    extraArgs: [...backend.extraArgs],
  };
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
