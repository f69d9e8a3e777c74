import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { ContainerTasks } from '../sandbox/container.js';
import {
  CONTAINER_TASK_DIR,
  cardDevices,
  containerArgs,
  containerName,
  envFileText,
  imageRunRef,
  inspectImage,
} from '../sandbox/container.js';
import {
  type ContainerParentCgroup,
  makeContainerParent,
  parentOomProbe,
  wantsParentCgroup,
} from '../sandbox/container-cgroup.js';
import { containerOomProbe } from '../sandbox/container-oom.js';
import { deviceNodesFor } from '../sandbox/devices.js';
import { containerTaskLimits } from '../sandbox/limits.js';
import { mountTaskFs, roomMissing } from '../sandbox/task-fs.js';
import type { ExecutorProvider } from '../task-io/env.js';
import { buildTaskEnv } from '../task-io/env.js';
import type { TaskBox } from './box.js';
import { containerBox } from './container-box.js';

/**
 * The box of a `container` task (sandbox/container.ts for what the container sees). The executor has
 * already made the execution's directories, owned by `user`; this checks the image, writes the env file
 * into the worker-only execution root and assembles the engine's argv.
 */

/** Everything one container box needs from the executor. */
export interface ContainerBoxRequest {
  readonly plan: ExecutionPlan;
  readonly tasks: ContainerTasks;
  readonly execRoot: string;
  readonly taskDir: string;
  readonly workerId: string;
  readonly provider: ExecutorProvider;
  readonly user: { uid: number; gid: number };
}

/** The box, or why the task cannot start (SETUP_FAILED). */
export async function containerBoxFor(req: ContainerBoxRequest): Promise<TaskBox | string> {
  const { plan, tasks } = req;
  const runtime = plan.spec.runtime;
  if (runtime.kind !== 'container') return `runtime kind ${runtime.kind} is not a container`;
  const local = await inspectImage(tasks.setup, runtime.image);
  const image = imageRunRef(runtime.image, plan.image_digest, local, {
    worker: req.workerId,
    engine: tasks.setup.engine,
  });
  if (!image.ok) return image.error;
  let devices: ReturnType<typeof cardDevices>;
  try {
    devices = cardDevices(
      req.provider,
      tasks.setup.cdi,
      plan.cards.map((c) => c.index),
      () =>
        deviceNodesFor(req.provider, plan.cards, {
          ...(tasks.simNodes === undefined ? {} : { simNodes: tasks.simNodes }),
          ...(tasks.devDir === undefined ? {} : { devDir: tasks.devDir }),
          ...(tasks.migMinorsPath === undefined ? {} : { migMinorsPath: tasks.migMinorsPath }),
        }),
    );
  } catch (err) {
    return errorMessage(err);
  }
  const env = buildTaskEnv(
    plan,
    { execDir: CONTAINER_TASK_DIR, outputDir: `${CONTAINER_TASK_DIR}/out`, tmpDir: '/tmp' },
    req.workerId,
    req.provider,
    { sandboxed: true },
  );
  const envFile = join(req.execRoot, 'container.env');
  const { text, inline } = envFileText(env);
  try {
    await writeFile(envFile, text, { mode: 0o600 });
  } catch (err) {
    return `cannot write ${envFile}: ${errorMessage(err)}`;
  }
  const name = containerName(plan.execution_id);
  // On cgroup v2 (podman), the container goes below the task's own cgroup (container-cgroup.ts).
  let parent: ContainerParentCgroup | null = null;
  if (plan.limits !== undefined && wantsParentCgroup(tasks.cgroups, tasks.setup.engine)) {
    const made = await makeContainerParent(tasks.cgroups, plan.execution_id, plan.limits);
    if (typeof made === 'string') return made;
    parent = made;
  }
  const args = containerArgs({
    engine: tasks.setup.engine,
    name,
    executionId: plan.execution_id,
    image: image.ref,
    taskDir: req.taskDir,
    envFile,
    inlineEnv: inline,
    devices,
    network: plan.spec.network ?? 'none',
    user: req.user,
    limits: plan.limits ?? null,
    cpus: plan.cpus ?? null,
    holdOnOom: tasks.setup.holdOnOom === true,
    ...(parent === null ? {} : { cgroupParent: parent.path }),
    init: tasks.setup.init,
    argv: runtime.argv,
    // The worker stops it at its time limit; without the worker, podman's conmon does a little later.
    backstopSeconds: plan.spec.time_limit_seconds + CONTAINER_BACKSTOP_GRACE_S,
  });
  // The execution id in the client's own env lets recovery recognise its process group after a restart.
  const clientEnv = { ...tasks.setup.env, GPU_BROKER_EXECUTION_ID: plan.execution_id };
  // The task dir's own file system, as a process task's (sandbox/task-fs.ts): mounted before the
  // container exists; where it cannot be, the walk, and the report says why.
  const fs =
    plan.limits === undefined || tasks.taskFs == null
      ? null
      : await mountTaskFs(tasks.taskFs, {
          execRoot: req.execRoot,
          taskDir: req.taskDir,
          diskMib: plan.limits.disk_mib,
          owner: req.user,
        });
  if (typeof fs === 'string' && roomMissing(fs)) {
    await parent?.cgroup.remove();
    return fs;
  }
  // The same watch and scratch removal as a sandboxed task's (sandbox/limits.ts); the engine holds the rest.
  const limits =
    plan.limits === undefined
      ? null
      : containerTaskLimits({
          limits: plan.limits,
          cpus: plan.cpus ?? null,
          taskDir: req.taskDir,
          engine: tasks.setup.engine,
          underOom: parent === null ? containerOomProbe(tasks.setup, name) : parentOomProbe(parent),
          parent: parent === null ? null : { cgroup: parent.cgroup, describe: 'v2' },
          fs,
        });
  return containerBox(
    { command: tasks.setup.command, args, env: clientEnv },
    {
      setup: tasks.setup,
      name,
      executionId: plan.execution_id,
      graceSeconds: plan.kill_grace_seconds,
      limits,
    },
  );
}

/**
 * How long past its time limit podman kills a container on its own (`--timeout`), when the worker that
 * should have stopped it is gone: well past the worker's own stop and kill grace.
 */
export const CONTAINER_BACKSTOP_GRACE_S = 120;
