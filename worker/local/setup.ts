import { chmod, mkdir } from 'node:fs/promises';
import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import { executionIdProblem } from '../executions/executor.js';
import type { ContainerTasks } from '../sandbox/container.js';
import { NOBODY } from '../sandbox/container.js';
import { hiddenMounts } from '../sandbox/host-mounts.js';
import { setupTaskLimits } from '../sandbox/limits.js';
import type { RunAs } from '../sandbox/run-as.js';
import type { SandboxSetup } from '../sandbox/setup.js';
import type { ExecutorProvider } from '../task-io/env.js';
import { buildTaskEnv } from '../task-io/env.js';
import { type InputSource, placeInputs } from '../task-io/inputs.js';
import { giveTaskDirs, makeTaskDirs, type TaskLayout, taskLayout } from '../task-io/layout.js';
import { type DataMount, mountsAsDeclared, resolveMounts } from '../task-io/mounts.js';
import type { TaskBox } from './box.js';
import { plainBox } from './box.js';
import { bwrapBoxFor } from './bwrap-box.js';
import { containerBoxFor } from './container-task.js';

/**
 * Step 1 of a local execution (executor.ts): the fresh layout (task-io/layout.ts, shared with the Slurm
 * executor), the spec's inputs (bound read-only over `task/` in a sandbox; placed straight into `task/`,
 * 0444, when unsandboxed), the env built from nothing, and the box (box.ts): bubblewrap with only the
 * leased cards' device nodes, or a plain process group when the worker runs with `--isolation none`; a
 * `container` task gets the engine's container instead (container-task.ts), whatever the isolation.
 */

/** What step 1 reads of the executor's options (executor.ts ExecutorOptions). */
export interface LocalSetupOptions {
  /** Directory under which each execution gets its own `<execution_id>/` directory. */
  readonly rootDir: string;
  /** This worker's id, passed to the task as GPU_BROKER_WORKER_ID. */
  readonly workerId: string;
  /** The card vendor; `sim` sets GPU_BROKER_SIMULATED=1. */
  readonly provider: ExecutorProvider;
  /** Run the task as this unprivileged user (the worker must be root); default: the worker's user. */
  readonly runAs?: RunAs;
  /** How tasks are isolated; default `{kind: 'none'}` (tests of the bare mechanics). */
  readonly sandbox?: SandboxSetup;
  /** How `container` tasks run; absent: this worker has no engine and refuses them (SETUP_FAILED). */
  readonly containers?: ContainerTasks;
  /** Where the spec's inputs come from (cache, then master); a spec with inputs fails setup without it. */
  readonly inputs?: InputSource;
  /** Named data mounts this worker offers (worker/task-io/mounts.ts). */
  readonly mounts?: readonly DataMount[];
}

/** The box to spawn, and who owns the task's files (for collecting outputs). */
export interface LocalSetup {
  readonly box: TaskBox;
  readonly owner: number | null;
}

type Identity = { uid: number; gid: number };

/**
 * Makes the execution's directories under `execRoot` and its box; returns why it could not. `signal`
 * stops an input fetch part-way (the execution was cancelled, or a backfilled run's deadline came).
 */
export async function setupExecution(
  plan: ExecutionPlan,
  opts: LocalSetupOptions,
  execRoot: string,
  signal?: AbortSignal,
): Promise<LocalSetup | string> {
  const badId = executionIdProblem(plan.execution_id);
  if (badId !== null) return badId;
  const runtime = plan.spec.runtime;
  if (runtime.kind === 'container' && opts.containers === undefined)
    return `worker ${opts.workerId} has no container engine for container tasks (start it with --container-engine auto and install podman)`;
  if ((runtime.argv[0] ?? '') === '') return 'argv[0] is empty';
  const sandbox = opts.sandbox ?? { kind: 'none' };
  const identity = taskIdentity(plan, opts);
  if (typeof identity === 'string') return identity;
  const sandboxed = sandbox.kind === 'bwrap' || runtime.kind === 'container';
  const layout = taskLayout(execRoot, sandboxed);
  const dirs = await makeExecutionDirs(plan, opts, execRoot, layout, identity);
  if (typeof dirs === 'string') return dirs;
  const inputsProblem = await placeSpecInputs(plan, opts, layout, signal);
  if (inputsProblem !== null) return inputsProblem;
  if (signal?.aborted === true) return 'setup was stopped';
  const handOver = await handOverTaskDirs(layout, dirs.giveTo);
  if (handOver !== null) return handOver;
  // 1c. named data mounts: exactly those the spec asks for, and only in a sandbox.
  // The policy's hidden paths as written and as this host resolves them (a link or `..` on the way).
  const hidden = plan.hidden_paths ?? [];
  const mounts = resolveMounts(plan.spec.mounts ?? [], opts.mounts ?? [], sandboxed, [
    ...hidden,
    ...hiddenMounts(hidden).map((h) => h.path),
  ]);
  if (typeof mounts === 'string') return mounts;
  const moved = await mountsAsDeclared(mounts);
  if (moved !== null) return moved;
  const owner = identity?.uid ?? process.getuid?.() ?? null;
  const containers = opts.containers;
  if (runtime.kind === 'container' && containers !== undefined && identity !== null) {
    const box = await containerBoxFor({
      plan,
      tasks: containers,
      execRoot,
      taskDir: layout.taskDir,
      workerId: opts.workerId,
      provider: opts.provider,
      user: identity,
    });
    return typeof box === 'string' ? box : { box, owner };
  }
  if (runtime.kind !== 'process') return `runtime kind ${runtime.kind} is not supported by this worker`;
  const env = buildTaskEnv(plan, layout.dirs, opts.workerId, opts.provider, { sandboxed });
  if (sandbox.kind === 'none') {
    const [command = '', ...args] = plan.argv ?? runtime.argv;
    return { box: plainBox({ command, args, env, ...(identity ?? {}) }), owner };
  }
  // 1d. the task's limits: its cgroup exists (empty) before anything of the task does.
  const limits =
    plan.limits === undefined
      ? null
      : await setupTaskLimits({
          executionId: plan.execution_id,
          limits: plan.limits,
          cpus: plan.cpus ?? null,
          cgroups: sandbox.cgroups ?? null,
          taskDir: layout.taskDir,
          ...(sandbox.taskFs == null ? {} : { taskFs: { tools: sandbox.taskFs, execRoot, owner: identity } }),
        });
  if (typeof limits === 'string') return limits;
  const box = bwrapBoxFor({
    plan,
    sandbox,
    provider: opts.provider,
    taskDir: layout.taskDir,
    inputsDir: layout.inputsDir,
    mounts,
    identity,
    env,
    limits,
  });
  if (typeof box === 'string') {
    await limits?.release();
    return box;
  }
  return { box, owner };
}

/** Gives back the task's uid (container or root bwrap task), once nothing of the task can act under it. */
export function releaseTaskUid(plan: ExecutionPlan, opts: LocalSetupOptions): void {
  const sandbox = opts.sandbox;
  if (plan.spec.runtime.kind === 'container') opts.containers?.uids?.release(plan.execution_id);
  else if (sandbox?.kind === 'bwrap') sandbox.uids?.release(plan.execution_id);
}

/** The uid/gid the task runs as (null: the worker's own, or bwrap's user namespace), or why none is free. */
function taskIdentity(plan: ExecutionPlan, opts: LocalSetupOptions): Identity | null | string {
  const id = plan.execution_id;
  const sandbox = opts.sandbox ?? { kind: 'none' };
  try {
    if (plan.spec.runtime.kind === 'container') {
      // Never root inside: a uid of its own on a root worker, else nobody.
      const uid = opts.containers?.uids?.acquire(id) ?? NOBODY;
      return { uid, gid: uid };
    }
    if (sandbox.kind === 'bwrap' && sandbox.uids !== null) {
      const uid = sandbox.uids.acquire(id);
      return { uid, gid: uid };
    }
    if (sandbox.kind === 'none' && opts.runAs) return { uid: opts.runAs.uid, gid: opts.runAs.gid };
    return null;
  } catch (err) {
    return errorMessage(err);
  }
}

/**
 * The executions dir, the execution root and the task's dirs, or why not; with whom the task's dirs go to
 * once the inputs are placed (handOverTaskDirs), when not given at once. Sandboxed, the inputs have a dir
 * of their own, so the task's dirs are the task user's from the start; unsandboxed, the inputs land in the
 * task's dir, which stays the worker's (0700) until they are placed.
 */
async function makeExecutionDirs(
  plan: ExecutionPlan,
  opts: LocalSetupOptions,
  execRoot: string,
  layout: TaskLayout,
  identity: Identity | null,
): Promise<{ giveTo: Identity | null } | string> {
  try {
    await mkdir(opts.rootDir, { recursive: true, mode: 0o700 });
    // Not recursive: an existing directory means this execution already ran here, and a run must
    // start from a fresh directory, never from a previous attempt's files.
    await mkdir(execRoot, { mode: 0o700 });
    const owned = identity !== null && (plan.spec.runtime.kind === 'process' || process.getuid?.() === 0);
    if (owned && !layout.sandboxed) {
      // Unsandboxed, the task's user reaches its dir through the host path: it may pass through the
      // executions dir and the execution root (not list them) and owns only its own dir.
      await chmod(opts.rootDir, 0o711);
      await chmod(execRoot, 0o711);
    }
    const giveNow = owned && layout.sandboxed;
    await makeTaskDirs(layout, giveNow ? identity : null);
    return { giveTo: owned && !giveNow ? identity : null };
  } catch (err) {
    return `cannot create execution directory ${layout.taskDir}: ${errorMessage(err)}`;
  }
}

/** 1b'. the task's dirs to their user, after the inputs are in them (unsandboxed); or why not. */
async function handOverTaskDirs(layout: TaskLayout, owner: Identity | null): Promise<string | null> {
  if (owner === null) return null;
  try {
    await giveTaskDirs(layout, owner);
    return null;
  } catch (err) {
    return `cannot give the execution directory ${layout.taskDir} to uid ${owner.uid}: ${errorMessage(err)}`;
  }
}

/** 1b. inputs: fetched, verified and placed read-only before anything of the task exists; or why not. */
async function placeSpecInputs(
  plan: ExecutionPlan,
  opts: LocalSetupOptions,
  layout: TaskLayout,
  signal: AbortSignal | undefined,
): Promise<string | null> {
  const inputs = plan.spec.inputs ?? [];
  // Not yet bound into containers: refuse rather than run a container without the reviewed files.
  if (plan.spec.runtime.kind === 'container' && (inputs.length > 0 || (plan.spec.mounts ?? []).length > 0))
    return 'inputs and named mounts are not supported for container tasks yet: put the files in the image, or run a process task';
  if (inputs.length === 0) return null;
  if (opts.inputs === undefined) return 'this worker was started without a way to fetch inputs';
  try {
    if (layout.sandboxed) await mkdir(layout.inputsDir, { mode: 0o755 });
  } catch (err) {
    return `cannot create the inputs directory: ${errorMessage(err)}`;
  }
  return placeInputs(inputs, layout.inputsDir, plan.execution_id, opts.inputs, signal);
}
