import { mkdir } from 'node:fs/promises';
import {
  DEFAULT_MAX_LOG_BYTES_PER_TASK,
  type ExecutionPlan,
  logTruncatedMarker,
} from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import { executionIdProblem } from '../executions/executor.js';
import { bwrapArgs } from '../sandbox/bwrap.js';
import { rehiddenBelow } from '../sandbox/host-mounts.js';
import { taskBwrapRequest, taskHiddenPaths } from '../sandbox/task-bwrap.js';
import { buildTaskEnv } from '../task-io/env.js';
import { placeInputs } from '../task-io/inputs.js';
import { makeTaskDirs, type TaskLayout, taskLayout } from '../task-io/layout.js';
import { mountsAsDeclared, type ResolvedMount, resolveMounts } from '../task-io/mounts.js';
import type { SlurmBackend, SlurmExecutionOptions } from './backend.js';
import type { PoolGres } from './cli/gres.js';
import { jobFiles, type WrapperSandbox, writeJobFiles } from './cli/job-wrapper.js';
import { hiddenPathList, splitBwrapArgs } from './cli/rank-script.js';
import { GRES_TYPE } from './cli/sbatch-args.js';
import type { SlurmSubmitRequest } from './cli/types.js';

/** Variable names Slurm reads or sets itself: a spec may not set them for its task. */
const SLURM_OWN = /^(SLURM_|SLURMD_|SBATCH_|SRUN_|SALLOC_|SPANK_)/;

/** The `--comment` marker of this worker's jobs: `gpu-broker:<worker>:<execution>`. */
export function jobMarker(workerId: string, executionId: string): string {
  return `${markerPrefix(workerId)}${executionId}`;
}

/** What every job of this worker's comment starts with (the worker id reduced to the marker's alphabet). */
export function markerPrefix(workerId: string): string {
  return `gpu-broker:${workerId.replace(/[^A-Za-z0-9._@%+-]/g, '_').slice(0, 100)}:`;
}

/** What `prepareSlurmJob` reads of the execution's options. */
type JobSetupOptions = Pick<
  SlurmExecutionOptions,
  'backend' | 'workerId' | 'provider' | 'inputs' | 'mounts' | 'maxLogBytes'
>;

/** The uid (and setpriv) a root worker's sandboxed task drops to; null when it does not drop. */
type TaskIdentity = { uid: number; gid: number; setpriv: string } | null;

/** Visible-device variables of the lease: its indexes are pool slots, not devices, so the ranks set them. */
const LEASE_DEVICE_VARS = [
  'CUDA_VISIBLE_DEVICES',
  'HIP_VISIBLE_DEVICES',
  'ROCR_VISIBLE_DEVICES',
  'GPU_BROKER_GPU_IDS',
  'GPU_BROKER_GPU_UUIDS',
  // A slice's lease names a pool slot, not its MIG- uuid: the rank sets CUDA_VISIBLE_DEVICES for it.
  'NVIDIA_VISIBLE_DEVICES',
] as const;

/**
 * Step 1 of a Slurm execution: refuses what a Slurm job cannot honour (container runtime; named
 * mounts without the sandbox), places the inputs on the shared job dir, fixes the rank's bwrap sandbox
 * (all but the device binds and which hidden paths exist, which only the node knows), writes the job
 * wrapper, the task's env file (the only way the spec's env travels: docs/security.md "Code the reviewer did not read") and the task's
 * directories, and returns the sbatch request — or why the plan cannot run as a Slurm job. `signal`
 * stops an input fetch part-way (the execution was cancelled).
 */
export async function prepareSlurmJob(
  plan: ExecutionPlan,
  opts: JobSetupOptions,
  execDir: string,
  signal?: AbortSignal,
): Promise<SlurmSubmitRequest | string> {
  const { backend } = opts;
  const id = plan.execution_id;
  const argv = rankArgv(plan, opts.inputs !== undefined);
  if (typeof argv === 'string') return argv;
  const sandbox = backend.sandbox;
  const layout = taskLayout(execDir, sandbox !== null);
  const identity = taskIdentity(backend, id);
  if (typeof identity === 'string') return identity;
  // Inputs (the reviewed files, by sha256) on the shared job dir: a sandbox binds each top-level entry
  // read-only at /task/<entry>, as on a local worker; unsandboxed they are placed in the task dir, 0444.
  // Named data mounts: exactly those the spec asks for, as the operator declared them (paths on the
  // filesystem the nodes share), and only in a sandbox, at /mnt/<name>.
  const mounts = resolveMounts(
    plan.spec.mounts ?? [],
    opts.mounts ?? [],
    sandbox !== null,
    plan.hidden_paths,
  );
  if (typeof mounts === 'string') return mounts;
  const moved = await mountsAsDeclared(mounts);
  if (moved !== null) return moved;
  const wrapperSandbox = rankSandbox(plan, backend, layout, mounts, identity, argv);
  if (typeof wrapperSandbox === 'string') return wrapperSandbox;
  const env = slurmTaskEnv(plan, layout, opts);
  const logCap = opts.maxLogBytes ?? DEFAULT_MAX_LOG_BYTES_PER_TASK;
  const job = { execDir, argv, env, wrapperSandbox, logCap };
  const written = await writeJobDir(plan, backend, layout, identity, job);
  if (written !== null) return written;
  const inputs = plan.spec.inputs ?? [];
  if (inputs.length > 0 && opts.inputs !== undefined) {
    // A cancel stops a fetch part-way (`signal`), as on a local worker.
    const problem = await placeInputs(inputs, layout.inputsDir, id, opts.inputs, signal);
    if (problem !== null) return problem;
  }
  const gres = leaseGresType(plan, backend.gres?.() ?? null);
  if (gres !== undefined && gres.problem !== null) return gres.problem;
  return submitRequest(plan, opts, execDir, layout.taskDir, gres);
}

/**
 * The GRES type to ask Slurm for the lease's cards (docs/slurm.md "MIG slices"): a slice's type
 * (`1g.10gb`, or AutoDetect's `nvidia_a100_80gb_pcie_1g.10gb`) — Slurm then gives the job a slice of that
 * profile, whichever the broker's slot named —, and on a pool with slices a whole card's type, since an
 * untyped `gpu:N` may be given a slice. Undefined: today's untyped `--gres=gpu:N`. A lease whose cards
 * the sample does not know, or of two types, is refused: the job would get other GPUs than reviewed.
 * On a pool without slices, typed whole cards are asked for by their types (`typedWholeCards`).
 */
export function leaseGresType(
  plan: Pick<ExecutionPlan, 'cards'>,
  gres: PoolGres | null,
): LeaseGres | undefined {
  if (gres === null) return undefined;
  if (!gres.hasSlices) return typedWholeCards(plan, gres);
  const types = new Set<string | null>();
  let slices = 0;
  for (const card of plan.cards) {
    const known = gres.cards.get(card.index);
    if (known === undefined)
      return { problem: `card ${card.index} of the lease is not in this Slurm pool's latest sample` };
    types.add(known.type);
    if (known.profile !== null) slices++;
  }
  const [type] = [...types];
  if (types.size !== 1 || type === undefined)
    return {
      problem: `the lease's cards are of several GRES types (${[...types].join(', ')}): Slurm cannot give one job that`,
    };
  if (slices > 0 && slices !== plan.cards.length)
    return { problem: 'the lease mixes MIG slices and whole cards' };
  if (type === null) {
    if (slices > 0) return { problem: 'a MIG slice without a GRES type' };
    // An untyped whole card beside typed slices: `gpu:N` could get a slice; refuse rather than guess.
    return {
      problem:
        "this Slurm pool has MIG slices and untyped whole cards: an untyped --gres=gpu:N could be given a slice; type the whole cards in slurm.conf's Gres= and gres.conf",
    };
  }
  return { type, problem: null };
}

/** What to ask Slurm for a lease's cards: one GRES type, several on one node, or why it cannot run. */
export type LeaseGres =
  | { type: string; types?: undefined; problem: null }
  | { type?: undefined; types: ReadonlyArray<{ type: string; count: number }>; problem: null }
  | { type?: undefined; types?: undefined; problem: string };

/**
 * A lease of whole cards on a pool without slices, asked for by type (their model names it: a task
 * placed for `cards.model: A100` must get the A100s it was placed on, not a node's H100s): all of one
 * type as `gpu:<type>:N`; of several types on one node as `gpu:<a>:n,gpu:<b>:m`. Untyped as before
 * (undefined) when a card is untyped or not in the sample, a type is one sbatch would not be given, or
 * the cards of several types span nodes (one `--gres` applies to every node of the job).
 */
function typedWholeCards(plan: Pick<ExecutionPlan, 'cards'>, gres: PoolGres): LeaseGres | undefined {
  const counts = new Map<string, number>();
  const nodes = new Set<string>();
  for (const card of plan.cards) {
    const known = gres.cards.get(card.index);
    if (known === undefined || known.type === null || !GRES_TYPE.test(known.type)) return undefined;
    counts.set(known.type, (counts.get(known.type) ?? 0) + 1);
    nodes.add(known.node);
  }
  const [first] = counts.keys();
  if (first === undefined) return undefined;
  if (counts.size === 1) return { type: first, problem: null };
  if (nodes.size !== 1) return undefined;
  return { types: [...counts].map(([type, count]) => ({ type, count })), problem: null };
}

/** The argv each rank runs, or why the plan cannot run as a Slurm job. */
function rankArgv(plan: ExecutionPlan, canFetchInputs: boolean): readonly string[] | string {
  const badId = executionIdProblem(plan.execution_id);
  if (badId !== null) return badId;
  const runtime = plan.spec.runtime;
  if (runtime.kind !== 'process')
    return `runtime kind ${runtime.kind} is not supported by a Slurm worker; run a process task`;
  const slurmOwn = Object.keys(runtime.env ?? {}).find((k) => SLURM_OWN.test(k));
  if (slurmOwn !== undefined)
    return `environment variable ${JSON.stringify(slurmOwn)} is Slurm's own: a Slurm worker sets these for the task; remove it from runtime.env`;
  // What the task runs: the scheduler's argv (a script from the inputs in its interpreter's isolated
  // mode, src/domain/policy/run-argv.ts), else the spec's.
  const argv = plan.argv ?? runtime.argv;
  // Each rank starts the task through `env -i -- NAME=VALUE… argv`: a program path with `=` would read as a variable.
  if ((argv[0] ?? '').includes('='))
    return `argv[0] ${JSON.stringify(argv[0])} contains "=": name the program by a path without one`;
  if ((plan.spec.inputs ?? []).length > 0 && !canFetchInputs)
    return 'this worker was started without a way to fetch inputs';
  return argv;
}

/**
 * A root worker's jobs run as root on the nodes: the task drops to a uid of its own (setpriv), as on
 * a local root worker. An unprivileged worker's bwrap runs in a user namespace under the job's user.
 */
function taskIdentity(backend: SlurmBackend, id: string): TaskIdentity | string {
  const sandbox = backend.sandbox;
  try {
    if (sandbox !== null && sandbox.setup.uids !== null && sandbox.setup.setpriv !== null) {
      const uid = sandbox.setup.uids.acquire(id);
      return { uid, gid: uid, setpriv: sandbox.setup.setpriv };
    }
  } catch (err) {
    return errorMessage(err);
  }
  return null;
}

/** The rank's bwrap sandbox as the wrapper writes it; undefined without a sandbox. */
function rankSandbox(
  plan: ExecutionPlan,
  backend: SlurmBackend,
  layout: TaskLayout,
  mounts: readonly ResolvedMount[],
  identity: TaskIdentity,
  argv: readonly string[],
): WrapperSandbox | undefined | string {
  const sandbox = backend.sandbox;
  if (sandbox === null) return undefined;
  const shared = taskBwrapRequest(plan, sandbox.setup, layout, mounts);
  const args = bwrapArgs({
    ...shared,
    // Hidden by rank.sh on each node where they exist (below).
    hidden: [],
    devices: [],
    identity,
    statusFd: null,
  });
  const hidden = taskHiddenPaths(sandbox.setup, plan, [backend.jobDir]);
  const split = splitBwrapArgs(args, argv);
  if (split === null) return 'internal error: unexpected bwrap argument layout for a Slurm rank';
  return {
    ...split,
    bwrap: sandbox.setup.bwrap,
    // The worker's data dir and token file (setup.hiddenPaths), /root, /home, the policy's paths and
    // the whole job directory: a task never sees another job's files nor its own binding.json,
    // exit.json and task.env.
    hidden: hiddenPathList(hidden),
    rehide: rehiddenBelow(
      hidden.map((path) => ({ path, host: path })),
      [...shared.pinned.map((p) => ({ hostPath: p, inside: p })), ...mounts],
    ).flatMap((h) => [h.host, h.path]),
    gpuDevDir: sandbox.gpuDevDir,
    gpuKind: sandbox.gpuKind ?? 'nvidia',
    ...gresFilesOf(backend, sandbox.gpuKind ?? 'nvidia'),
    ...(sandbox.setup.seccomp == null ? {} : { seccomp: sandbox.setup.seccomp.program }),
    pins: (plan.pins ?? []).map((p) => ({ path: p.path, sha256: p.sha256 })),
  };
}

/**
 * The nodes' device files by GPU position, where gres.conf says them (nvidia only): each rank binds
 * exactly its positions' files (a MIG slice's parent and capability nodes), never `nvidia<position>`.
 */
function gresFilesOf(backend: SlurmBackend, kind: 'nvidia' | 'hy'): Pick<WrapperSandbox, 'gresFiles'> {
  const gres = backend.gres?.() ?? null;
  if (gres === null || kind !== 'nvidia') return {};
  const map: Record<string, ReadonlyArray<readonly string[] | null>> = {};
  for (const [node, positions] of gres.files) if (positions.some((p) => p !== null)) map[node] = positions;
  return Object.keys(map).length === 0 ? {} : { gresFiles: map };
}

/** The task's environment from nothing: the base, the spec's env, GPU_BROKER_*; the ranks add the binding. */
function slurmTaskEnv(
  plan: ExecutionPlan,
  layout: TaskLayout,
  opts: JobSetupOptions,
): Record<string, string> {
  const sandboxed = opts.backend.sandbox !== null;
  const env = buildTaskEnv(plan, layout.dirs, opts.workerId, opts.provider, { sandboxed });
  // Tells the task (the qualification workload) that its GPUs are the ones Slurm gave the job.
  env.GPU_BROKER_BACKEND = 'slurm';
  // The lease's indexes are pool slots, not devices: each rank sets the visible devices for the GPUs
  // Slurm gave it (and a sandboxed rank renumbers them for the devices it binds).
  for (const k of LEASE_DEVICE_VARS) delete env[k];
  return env;
}

/** Writes the job wrapper and the task's directories; null, or why the job dir could not be prepared. */
async function writeJobDir(
  plan: ExecutionPlan,
  backend: SlurmBackend,
  layout: TaskLayout,
  identity: TaskIdentity,
  job: {
    execDir: string;
    argv: readonly string[];
    env: Record<string, string>;
    wrapperSandbox: WrapperSandbox | undefined;
    /** The task's log cap: each of the job's output files keeps at most this (job-wrapper.ts). */
    logCap: number;
  },
): Promise<string | null> {
  try {
    await mkdir(backend.jobDir, { recursive: true, mode: 0o700 });
    await writeJobFiles({
      jobDir: job.execDir,
      argv: [...job.argv],
      taskEnv: job.env,
      ntasksPerNode: 1,
      logCap: { bytes: job.logCap, marker: logTruncatedMarker(job.logCap) },
      slurmCommands: {
        srun: backend.driver.commandPath('srun'),
        scontrol: backend.driver.commandPath('scontrol'),
      },
      ...(job.wrapperSandbox === undefined ? {} : { sandbox: job.wrapperSandbox }),
    });
    // The owner is the task's uid when a root worker's task drops to one (only in a sandbox: no tmp/).
    await makeTaskDirs(layout, identity);
    if ((plan.spec.inputs ?? []).length > 0 && backend.sandbox !== null)
      await mkdir(layout.inputsDir, { mode: 0o755 });
  } catch (err) {
    return `cannot prepare the job directory ${job.execDir}: ${errorMessage(err)}`;
  }
  return null;
}

/** Step 2's sbatch request for the prepared job. */
async function submitRequest(
  plan: ExecutionPlan,
  opts: JobSetupOptions,
  execDir: string,
  taskDir: string,
  gres: LeaseGres | undefined,
): Promise<SlurmSubmitRequest> {
  const { backend } = opts;
  const id = plan.execution_id;
  const perNode = plan.spec.cards.per_node ?? plan.spec.cards.count;
  const nodes = Math.max(1, Math.round(plan.spec.cards.count / perNode));
  const files = jobFiles(execDir);
  return {
    scriptPath: files.script,
    jobName: `gpu-broker-${id}`.slice(0, 200),
    comment: jobMarker(opts.workerId, id),
    partition: backend.partition,
    ...(backend.account === undefined ? {} : { account: backend.account }),
    ...(backend.qos === undefined ? {} : { qos: backend.qos }),
    gpusPerNode: perNode,
    ...(gres?.type === undefined ? {} : { gpuType: gres.type }),
    ...(gres?.types === undefined ? {} : { gpuTypes: gres.types }),
    nodes,
    // The task's memory limit, split over its nodes; Slurm's cgroup enforces it (docs/slurm.md).
    ...(plan.limits === undefined
      ? {}
      : { memoryMibPerNode: await memoryPerNode(backend, plan.limits.memory_mib, nodes) }),
    // The CPUs the task asked for (limits.cpus), split over its nodes: otherwise Slurm gives the
    // partition's default, often one CPU, and the ask is silently not what runs (docs/slurm.md).
    ...(plan.cpus === undefined ? {} : { cpusPerTask: await cpusPerNode(backend, plan.cpus, nodes) }),
    ntasksPerNode: 1,
    timeLimitSeconds: plan.spec.time_limit_seconds,
    stdout: files.stdout,
    stderr: files.stderr,
    chdir: taskDir,
    extraArgs: [...backend.extraArgs],
  };
}

/**
 * `--cpus-per-task` per node (one task per node): the task's CPUs over its nodes, but never more than the
 * partition's smallest node has (`CPUTot`), which Slurm would refuse outright; as `memoryPerNode`, a
 * stricter bound than the reviewed one, never a looser one. Nodes that cannot be read: as asked.
 */
async function cpusPerNode(backend: SlurmBackend, cpus: number, nodes: number): Promise<number> {
  const wanted = Math.ceil(cpus / nodes);
  const sizes = await backend.driver.nodes(backend.partition).then(
    (list) => list.map((n) => n.cpus).filter((c) => Number.isInteger(c) && c > 0),
    () => [] as number[],
  );
  return sizes.length === 0 ? wanted : Math.min(wanted, ...sizes);
}

/**
 * `--mem` per node: the task's limit over its nodes, but never more than the partition's smallest node
 * has (`RealMemory`), since Slurm refuses such a job outright ("Requested node configuration is not
 * available") although the node could never give the task more anyway. A stricter bound than the
 * reviewed one, never a looser one. When the nodes cannot be read, the limit is asked for as is.
 */
async function memoryPerNode(backend: SlurmBackend, memoryMib: number, nodes: number): Promise<number> {
  const wanted = Math.ceil(memoryMib / nodes);
  const sizes = await backend.driver.nodes(backend.partition).then(
    (list) => list.map((n) => n.realMemoryMib ?? null).filter((m): m is number => m !== null),
    () => [] as number[],
  );
  return sizes.length === 0 ? wanted : Math.min(wanted, ...sizes);
}
