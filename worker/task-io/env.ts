import { cardLabel, MIG_INDEX_BASE } from '../../src/contracts/sample.js';
import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';

/**
 * The environment a task process sees (docs/worker-protocol.md). It is built from nothing: the worker's own
 * environment (its token, its config paths) never reaches the task.
 */

/** Which card vendor the worker drives; `sim` cards are simulated and say so to the task. */
export type ExecutorProvider = 'nvidia' | 'hy' | 'sim';

/** A fixed search path, so the task never inherits whatever PATH the worker daemon was started with. */
export const TASK_DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Where the task's files live, as the task sees them; all paths are absolute. */
export interface TaskDirs {
  /** The task's directory: cwd and HOME of the task (`/task` in a sandbox). */
  readonly execDir: string;
  /** The output directory (`<execDir>/out`). */
  readonly outputDir: string;
  /** The task's private TMPDIR (`/tmp` in a sandbox, `<execDir>/tmp` otherwise). */
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
  opts: { sandboxed?: boolean } = {},
): Record<string, string> {
  const indexes = plan.cards.map((c) => cardLabel(c.index)).join(',');
  const uuids = plan.cards.map((c) => c.uuid).join(',');
  // In a sandbox only the leased cards' nodes exist, and CUDA/HIP number what they can open from 0, so
  // the visible set is 0..n-1 there; GPU_BROKER_GPU_IDS keeps the host's indexes for the evidence.
  // A MIG slice is named by its MIG- uuid, which CUDA takes as it is (MIG devices are not renumbered),
  // and containers by NVIDIA_VISIBLE_DEVICES the same (docs/decisions/0046-mig-slices-as-cards.md).
  const slices = plan.cards.some((c) => c.index >= MIG_INDEX_BASE);
  const visible = slices ? uuids : opts.sandboxed ? plan.cards.map((_, i) => String(i)).join(',') : indexes;
  return {
    PATH: TASK_DEFAULT_PATH,
    LANG: 'C.UTF-8',
    HOME: dirs.execDir,
    TMPDIR: dirs.tmpDir,
    ...(plan.spec.runtime.env ?? {}),
    // Card indexes come from the sampler (nvidia-smi / hy-smi), which numbers cards in PCI bus order;
    // CUDA's default order is "fastest first", so without this the indexes could name other cards.
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    CUDA_VISIBLE_DEVICES: visible,
    HIP_VISIBLE_DEVICES: visible,
    ROCR_VISIBLE_DEVICES: visible,
    ...(slices ? { NVIDIA_VISIBLE_DEVICES: uuids } : {}),
    GPU_BROKER_TASK_ID: plan.task_id,
    GPU_BROKER_EXECUTION_ID: plan.execution_id,
    GPU_BROKER_ASSIGNMENT_ID: plan.assignment_id,
    GPU_BROKER_LEASE_EPOCH: String(plan.lease_epoch),
    GPU_BROKER_GPU_IDS: indexes,
    GPU_BROKER_GPU_UUIDS: uuids,
    GPU_BROKER_OUTPUT_DIR: dirs.outputDir,
    GPU_BROKER_WORKER_ID: workerId,
    GPU_BROKER_SIMULATED: provider === 'sim' ? '1' : '0',
    // Always set (a spec cannot forge them): 1 when an earlier run of this task was preempted, so the
    // task resumes from its checkpoint (docs/operations.md "Borrowing and reclaim").
    GPU_BROKER_PREEMPTED: (plan.preemptions ?? 0) > 0 ? '1' : '0',
    GPU_BROKER_PREEMPTIONS: String(plan.preemptions ?? 0),
  };
}
