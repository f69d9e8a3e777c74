/**
 * The Slurm driver's vocabulary: what the worker's Slurm backend asks of Slurm and what it gets back.
 * Nothing here knows the broker protocol; ids are Slurm's own (strings: array and heterogeneous jobs
 * have ids such as `123_4` or `123+0`). Times are epoch milliseconds (UTC), `null` when Slurm has none.
 *
 * Job states (Slurm's base states, as `scontrol show job` prints them):
 * - PENDING: queued; `reason` says why (Resources, Priority, QOSMaxGRESPerUser, …).
 * - CONFIGURING: nodes allocated, booting/being set up.
 * - RUNNING: started; `nodes` and `gpus` are known.
 * - SUSPENDED: running but stopped by an admin or preemption (suspend mode).
 * - COMPLETING: ended, epilog/cleanup still running on some node.
 * - COMPLETED: ended with exit code 0 on all nodes.
 * - FAILED: ended with a non-zero exit code or another failure.
 * - CANCELLED: scancel (by the owner or an admin).
 * - TIMEOUT: reached its time limit.
 * - NODE_FAIL: a node of the job failed.
 * - OUT_OF_MEMORY: a cgroup OOM was detected.
 * - PREEMPTED: preempted (cancel/requeue mode).
 * - BOOT_FAIL: a node failed to boot.
 * - DEADLINE: `--deadline` passed before it could run.
 * - REQUEUED / RESIZING / REVOKED / SPECIAL_EXIT / STOPPED: rarer states, passed through as is.
 */
export type SlurmJobState =
  | 'PENDING'
  | 'CONFIGURING'
  | 'RUNNING'
  | 'SUSPENDED'
  | 'COMPLETING'
  | 'COMPLETED'
  | 'FAILED'
  | 'CANCELLED'
  | 'TIMEOUT'
  | 'NODE_FAIL'
  | 'OUT_OF_MEMORY'
  | 'PREEMPTED'
  | 'BOOT_FAIL'
  | 'DEADLINE'
  | 'REQUEUED'
  | 'RESIZING'
  | 'REVOKED'
  | 'SPECIAL_EXIT'
  | 'STOPPED'
  /** A state this driver does not know (a newer Slurm); `rawState` has Slurm's word. */
  | 'UNKNOWN';

/** GPU indices Slurm gave a job on one node (`scontrol show job -d`: `Nodes=n1 … GRES=gpu:2(IDX:0-1)`). */
export interface SlurmNodeGpus {
  node: string;
  /** Node-local GPU indices, ascending; empty when the job has no GPUs on that node. */
  indices: number[];
}

/** One job as `scontrol show job -d -o` shows it. */
export interface SlurmJob {
  id: string;
  name: string;
  /** `--comment` (the broker puts its marker here), `null` when unset. */
  comment: string | null;
  user: string | null;
  partition: string | null;
  account: string | null;
  state: SlurmJobState;
  /** Slurm's own word for the state, including flags Slurm may append. */
  rawState: string;
  /** `Reason=`: why it pends (Resources, Priority, …) or why it ended; `null` for `None`. */
  reason: string | null;
  /** `ExitCode=X:S`: the exit code, `null` while the job has not ended. */
  exitCode: number | null;
  /** The signal that ended it (`S` of `ExitCode=X:S`), `null` when none (0) or not ended. */
  signal: number | null;
  /** Expanded node list (empty while pending). */
  nodes: string[];
  /** Per-node GPU indices, in node order (empty while pending or without `-d` detail). */
  gpus: SlurmNodeGpus[];
  /** GPUs per node the job asked for (`TresPerNode=gres:gpu:N`), `null` when it asked for none. */
  gpusPerNode: number | null;
  numNodes: number | null;
  submitTime: number | null;
  startTime: number | null;
  endTime: number | null;
  /** Time limit in seconds; `null` for UNLIMITED / Partition_Limit. */
  timeLimitSeconds: number | null;
  workDir: string | null;
  stdout: string | null;
  stderr: string | null;
  batchHost: string | null;
}

/** GPUs one job holds on one node (to tell broker jobs from foreign ones). */
export interface SlurmGpuHolder {
  jobId: string;
  name: string;
  comment: string | null;
  indices: number[];
}

/** One node as `scontrol show node -d -o` shows it, plus who holds its GPUs. */
export interface SlurmNode {
  name: string;
  /** Base state in upper case (IDLE, MIXED, ALLOCATED, DOWN, …). */
  state: string;
  /** Flags after the base state (DRAIN, NOT_RESPONDING, RESERVED, …), from `State=MIXED+DRAIN`. */
  stateFlags: string[];
  /** True when the node accepts no new jobs (DOWN, DRAIN/DRAINING/DRAINED, FAIL, INVAL, NOT_RESPONDING…). */
  unavailable: boolean;
  cpus: number;
  /** GPUs configured (`Gres=gpu:8`, all types summed). */
  gpus: number;
  /**
   * The GPUs by type, in `Gres=` order (`gpu:h100:1,gpu:1g.10gb:2`): a job's IDX counts positions in
   * this order (gres.ts). Absent: untyped, as `[{type: null, count: gpus}]`.
   */
  gresTypes?: Array<{ type: string | null; count: number }>;
  /** GPUs allocated to jobs (`GresUsed=gpu:2…`). */
  gpusUsed: number;
  /**
   * Indices in use, ascending: from `GresUsed=…(IDX:…)` when Slurm prints it, else the union of the
   * running jobs' `GRES=gpu:N(IDX:…)` on this node (Slurm 22.05 without GPU types prints no IDX).
   */
  usedGpuIndices: number[];
  /** Running jobs holding GPUs on this node, with their indices. */
  holders: SlurmGpuHolder[];
  /** `Reason=` (why down/drained), `null` when none. */
  reason: string | null;
  partitions: string[];
  /** `RealMemory=` in MiB; null when absent or Slurm's unconfigured default (1). */
  realMemoryMib?: number | null;
}

/** What {@link SlurmDriver.submit} sends to `sbatch --parsable`. */
export interface SlurmSubmitRequest {
  /** Path of the batch script (see job-wrapper.ts); sbatch reads it at submit time. */
  scriptPath: string;
  /** `--job-name`. No whitespace or control characters. */
  jobName: string;
  /** `--comment`: a marker telling the broker's jobs from foreign ones. No whitespace or control characters. */
  comment: string;
  partition?: string;
  account?: string;
  qos?: string;
  /** GPUs per node (`--gres=gpu:N`); 0 or absent: no `--gres`. */
  gpusPerNode?: number;
  /**
   * The GRES type of those GPUs (`--gres=gpu:<type>:N`): a MIG profile as the nodes' gres.conf names it
   * (`1g.10gb`), or a whole card's type where the pool also has slices (an untyped `gpu:N` could be
   * given a slice). Absent: untyped, today's `--gres=gpu:N`.
   */
  gpuType?: string;
  /**
   * Several GRES types in one request (`--gres=gpu:<a>:1,gpu:<b>:1`), instead of `gpuType`: a one-node
   * lease of whole cards of several types on a pool whose GPUs are typed, so Slurm gives the job exactly
   * that mix (an untyped `gpu:N` could be given GPUs of a type the task was not placed on). The counts
   * sum to `gpusPerNode`.
   */
  gpuTypes?: ReadonlyArray<{ readonly type: string; readonly count: number }>;
  /** `--nodes`, default 1. */
  nodes?: number;
  /**
   * `--mem` in MiB: real memory per node (the task's memory limit over its nodes); absent: the
   * partition's default. Slurm's task/cgroup enforces it where `ConstrainRAMSpace=yes` (docs/slurm.md).
   */
  memoryMibPerNode?: number;
  /**
   * `--cpus-per-task`: the task's `limits.cpus` over its nodes (one task per node); absent: the
   * partition's default or the operator's extra argument. Placed after the operator's arguments, so it
   * wins; Slurm's task/cgroup pins the job to them where `ConstrainCores=yes` (docs/slurm.md).
   */
  cpusPerTask?: number;
  /** `--ntasks-per-node`, default 1. */
  ntasksPerNode?: number;
  /**
   * `--time` in seconds. Slurm keeps time limits in whole minutes, so this is rounded up to the next
   * minute and written as D-HH:MM:SS; the broker's own check enforces the exact seconds.
   */
  timeLimitSeconds?: number;
  /** `--output` / `--error` (absolute paths). */
  stdout: string;
  stderr: string;
  /** `--chdir`. */
  chdir: string;
  /**
   * Operator-fixed sbatch arguments (e.g. `--constraint=a100`, `--reservation=…`), put before the
   * driver's own so the driver's options win where both set the same thing. Agents never set these.
   */
  extraArgs?: string[];
}

/** What became of a job that `scontrol` no longer knows (see {@link SlurmDriver.lookupEnded}). */
export type SlurmEndedLookup =
  /** Found in the job completion log (jobcomp/filetxt) or accounting (sacct). */
  | { kind: 'ended'; source: 'jobcomp' | 'sacct'; job: SlurmEndedJob }
  /** Not found anywhere this driver can read: report it as lost. */
  | { kind: 'lost'; detail: string };

/** The final record of a job from jobcomp or sacct (no GPU indices there). */
export interface SlurmEndedJob {
  id: string;
  name: string;
  state: SlurmJobState;
  rawState: string;
  exitCode: number | null;
  signal: number | null;
  nodes: string[];
  startTime: number | null;
  endTime: number | null;
}
