import type { ExecutionPlan } from '../src/contracts/worker-protocol.js';

/**
 * The environment a task process sees (DESIGN §9). It is built from nothing: the worker's own
 * environment (its token, its config paths) never reaches the task.
 */

/** Which card vendor the worker drives; `sim` cards are simulated and say so to the task. */
export type ExecutorProvider = 'nvidia' | 'hy' | 'sim';

/** A fixed search path, so the task never inherits whatever PATH the worker daemon was started with. */
export const TASK_DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Where the task's files live; all paths are absolute. */
export interface TaskDirs {
  /** The execution directory: cwd and HOME of the task. */
  readonly execDir: string;
  /** The output directory (`<execDir>/out`). */
  readonly outputDir: string;
  /** The task's private TMPDIR (`<execDir>/tmp`). */
  readonly tmpDir: string;
}

/**
 * Builds the task's environment: a clean base, then the spec's env, then the binding variables.
 * The binding variables come last so a spec can never widen its own card visibility or forge its ids.
 */
export function buildTaskEnv(
  plan: ExecutionPlan,
  dirs: TaskDirs,
  workerId: string,
  provider: ExecutorProvider,
): Record<string, string> {
  const indexes = plan.cards.map((c) => String(c.index)).join(',');
  const uuids = plan.cards.map((c) => c.uuid).join(',');
  return {
    PATH: TASK_DEFAULT_PATH,
    LANG: 'C.UTF-8',
    HOME: dirs.execDir,
    TMPDIR: dirs.tmpDir,
    ...(plan.spec.runtime.env ?? {}),
    // Card indexes come from the sampler (nvidia-smi / hy-smi), which numbers cards in PCI bus order;
    // CUDA's default order is "fastest first", so without this the indexes could name other cards.
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    CUDA_VISIBLE_DEVICES: indexes,
    HIP_VISIBLE_DEVICES: indexes,
    ROCR_VISIBLE_DEVICES: indexes,
    GPU_BROKER_TASK_ID: plan.task_id,
    GPU_BROKER_EXECUTION_ID: plan.execution_id,
    GPU_BROKER_ASSIGNMENT_ID: plan.assignment_id,
    GPU_BROKER_LEASE_EPOCH: String(plan.lease_epoch),
    GPU_BROKER_GPU_IDS: indexes,
    GPU_BROKER_GPU_UUIDS: uuids,
    GPU_BROKER_OUTPUT_DIR: dirs.outputDir,
    GPU_BROKER_WORKER_ID: workerId,
    GPU_BROKER_SIMULATED: provider === 'sim' ? '1' : '0',
  };
}
