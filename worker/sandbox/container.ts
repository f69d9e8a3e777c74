import { MIG_INDEX_BASE } from '../../src/contracts/sample.js';
import type { ResolvedLimits } from '../../src/contracts/task-limits.js';
import type { NetworkMode } from '../../src/contracts/task-spec.js';
import type { ContainerEngine } from '../../src/contracts/worker-protocol.js';
import { type CgroupHierarchy, v1Shares } from './cgroups.js';
import type { ContainerSetup } from './container-probe.js';
import { engineOutput } from './container-probe.js';
import type { DeviceNode, SimNodes } from './devices.js';
import type { TaskFsTools } from './task-fs.js';
import type { TaskUidPool } from './task-uids.js';

// The engine's probe and its command runner live in container-probe.ts; re-exported so that no importer changes.
export type {
  ContainerEngineChoice,
  ContainerSetup,
} from './container-probe.js';
export {
  containersConf,
  engineOutput,
  hasNvidiaCdi,
  parseContainerEngine,
  probeContainerEngine,
} from './container-probe.js';

/**
 * The container every `container` task runs in (docs/security.md "Container tasks"), built by
 * the worker's engine (podman, or docker where podman is missing):
 *
 *   - the image by its local image id, after its digest was checked (imageRunRef), never pulled;
 *   - a read-only root, a private /tmp (tmpfs), no capabilities, no_new_privs, a pids limit;
 *   - no network unless the reviewed spec says `network: "host"`;
 *   - its execution dir at /task (cwd, outputs under /task/out), env as for a sandboxed process task;
 *   - only the leased cards: their device nodes, or CDI names (`nvidia.com/gpu=N`) where the host has
 *     NVIDIA CDI specs, since CDI also brings the driver's libraries into the container;
 *   - a non-root uid: the execution's own task uid on a root worker, else 65534 (nobody);
 *   - a name and a label derived from the execution id, so the box and cleanup can find it;
 *   - the task's limits as engine flags (containerLimitArgs) and, where memory is a cgroup v1 controller,
 *     `--oom-kill-disable`, so that at its memory limit the container is held for the worker's watch to
 *     end and report as OUT_OF_MEMORY (container-oom.ts, sandbox/limits.ts containerTaskLimits); on a
 *     cgroup v2 host, podman puts the container below the task's own cgroup (`--cgroup-parent`,
 *     container-cgroup.ts), whose `memory.events` tells an OOM kill apart after the container is gone.
 *
 * Podman on some hosts needs settings its defaults lack (found on Debian 12, cgroup v1/v2 hybrid, root):
 * crun refuses hybrid cgroups, and raising RLIMIT_NOFILE to podman's default ulimits is not permitted.
 * The worker therefore writes its own containers.conf under its data dir (`default_ulimits = []`, and
 * `runtime = "runc"` when the default runtime cannot start a container) and runs every podman command
 * with CONTAINERS_CONF pointing at it; storage stays where podman keeps it by default.
 */

/** The label every task container carries; its value is the execution id. */
export const CONTAINER_LABEL = 'gpu-broker.execution';
/** Where the task's execution dir appears inside the container. */
export const CONTAINER_TASK_DIR = '/task';
/** The uid/gid a task runs as when the worker has no uid pool (a worker that is not root). */
export const NOBODY = 65534;
/** Most processes one task container may have when the plan carries no limits (an older master). */
export const DEFAULT_PIDS_LIMIT = 4096;

/** How a worker runs `container` tasks; built once at worker start (setup.ts). */
export interface ContainerTasks {
  readonly setup: ContainerSetup;
  /** Per-task uids for a root worker (shared with the bwrap sandbox); null: tasks run as 65534. */
  readonly uids: TaskUidPool | null;
  /** Simulated cards' device nodes (sim workers). */
  readonly simNodes?: SimNodes;
  /** Where the real providers' device nodes are; default /dev. */
  readonly devDir?: string;
  /** Tests: the driver's MIG capability minors file (default /proc/driver/nvidia-caps/mig-minors). */
  readonly migMinorsPath?: string;
  /**
   * The worker's task cgroups (the sandbox's hierarchy): on cgroup v2, a podman task with limits runs
   * below its own cgroup (container-cgroup.ts); absent or v1: the engine's flags and the OOM watch only.
   */
  readonly cgroups?: CgroupHierarchy | null;
  /** A file system of its own for each task dir, as a process task's (task-fs.ts); absent: the walk. */
  readonly taskFs?: TaskFsTools | null;
}

/** Everything `containerArgs` needs. */
export interface ContainerRequest {
  readonly engine: ContainerEngine;
  /** The container's name (containerName()). */
  readonly name: string;
  /** The execution id, as the label's value. */
  readonly executionId: string;
  /** What to run: the local image id (or a reference) as imageRunRef decided. */
  readonly image: string;
  /** The host directory bound writable at CONTAINER_TASK_DIR. */
  readonly taskDir: string;
  /** A worker-only file with the task's env (envFileText), read by the engine client. */
  readonly envFile: string;
  /** Env entries the env file cannot carry (values with a line break), passed as `--env NAME=value`. */
  readonly inlineEnv: ReadonlyArray<readonly [string, string]>;
  /** The leased cards: device nodes, or CDI device names. */
  readonly devices: CardDevices;
  readonly network: NetworkMode;
  readonly user: { uid: number; gid: number };
  /** The task's resource limits, through the engine's own flags (docs/performance.md "Noisy neighbours"); null: the pids limit only. */
  readonly limits: ResolvedLimits | null;
  /** The plan's `cpus` (the spec's `limits.cpus`): `--cpus`; null or absent: none. */
  readonly cpus?: number | null;
  /** Hold the container at its memory limit rather than kill in it (ContainerSetup.holdOnOom). */
  readonly holdOnOom?: boolean;
  /**
   * The task's own cgroup v2 path (container-cgroup.ts) to put the container's cgroup in
   * (`--cgroup-parent`; podman with `--cgroup-manager cgroupfs`, which takes a path); absent: the engine's.
   */
  readonly cgroupParent?: string;
  readonly init: boolean;
  /** The task's argv inside the image. */
  readonly argv: readonly string[];
  /**
   * podman only (`--timeout`): conmon kills the container after this many seconds whether or not the
   * worker is still there (a SIGKILLed worker's container ran on with no time limit).
   * The worker's own stop at the task's time limit comes first; this is the backstop. Absent: none.
   */
  readonly backstopSeconds?: number;
}

/** How the leased cards reach the container. */
export type CardDevices =
  | { readonly kind: 'nodes'; readonly nodes: readonly DeviceNode[] }
  | { readonly kind: 'cdi'; readonly names: readonly string[] };

/** The container name of an execution: a fixed prefix and the id (execution ids are safe segments). */
export function containerName(executionId: string): string {
  return `gpu-broker-${executionId}`.slice(0, 200);
}

/**
 * How the leased cards are passed: CDI names `nvidia.com/gpu=<index>` on an NVIDIA host with CDI specs
 * (the spec also mounts the driver's user-space libraries, which a bare device node does not), else
 * the device nodes (deviceNodesFor). A MIG slice always goes as its nodes (its card's and its two
 * capability nodes, ADR 0046): the CDI spec names MIG devices by a device number the broker does not
 * keep, and a whole card's name would hand over every slice. Pure.
 */
export function cardDevices(
  provider: 'nvidia' | 'hy' | 'sim',
  cdi: boolean,
  indexes: readonly number[],
  nodes: () => DeviceNode[],
): CardDevices {
  if (provider === 'nvidia' && cdi && indexes.every((i) => i < MIG_INDEX_BASE))
    return { kind: 'cdi', names: indexes.map((i) => `nvidia.com/gpu=${i}`) };
  return { kind: 'nodes', nodes: nodes() };
}

/**
 * The engine's flags for the task's limits (docs/performance.md "Noisy neighbours"): memory with no swap beyond it, the pids limit,
 * the CPU weight (as cgroup v1 shares, which both engines map to v2's cpu.weight), /dev/shm's size.
 * /tmp's size is in its --tmpfs option; the task dir is watched like a sandbox's (sandbox/limits.ts).
 */
export function containerLimitArgs(l: ResolvedLimits): string[] {
  return [
    '--memory',
    `${l.memory_mib}m`,
    '--memory-swap',
    `${l.memory_mib}m`,
    '--pids-limit',
    String(l.pids),
    '--cpu-shares',
    String(v1Shares(l.cpu_weight)),
    '--shm-size',
    `${l.shm_mib}m`,
  ];
}

/** What of the engine's /sys a container task does not see (containerArgs). */
export const CONTAINER_MASKED_PATHS = ['/sys/devices/virtual/block', '/sys/fs/ext4'] as const;

/** The argv after the engine's executable for one task: `run --rm … IMAGE ARGV…`. Pure. */
export function containerArgs(req: ContainerRequest): string[] {
  const parent = req.cgroupParent;
  const args = [
    // A path for --cgroup-parent needs the cgroupfs manager (systemd's takes a slice name).
    ...(parent !== undefined && req.engine === 'podman' ? ['--cgroup-manager', 'cgroupfs'] : []),
    'run',
    '--rm',
    '--pull=never',
    '--name',
    req.name,
    '--label',
    `${CONTAINER_LABEL}=${req.executionId}`,
    '--network',
    req.network === 'host' ? 'host' : 'none',
    '--read-only',
    // runc keeps the mode of the image's /tmp (1777 in any usual image); mode= covers images without one.
    // /var/tmp too, of the same size (the engine's own was unsized). /run stays the
    // engine's root-owned 0755 tmpfs, which a task uid cannot write.
    '--tmpfs',
    `/tmp:rw,nosuid,nodev,mode=1777${req.limits === null ? '' : `,size=${req.limits.tmp_mib}m`}`,
    '--tmpfs',
    `/var/tmp:rw,nosuid,nodev,mode=1777${req.limits === null ? '' : `,size=${req.limits.tmp_mib}m`}`,
    ...(req.engine === 'podman' && req.backstopSeconds !== undefined
      ? ['--timeout', String(req.backstopSeconds)]
      : []),
    // The host's virtual block devices and ext4 file systems, which the engine's /sys shows: each task
    // dir is a loop device whose backing file names its execution (task-fs.ts), as for a sandboxed task
    // (host-mounts.ts MASKED_KERNEL_PATHS). podman masks them itself; docker's --tmpfs copies nothing
    // up (podman's would copy what it covers), so an empty read-only tmpfs over each.
    ...(req.engine === 'podman'
      ? ['--security-opt', `mask=${CONTAINER_MASKED_PATHS.join(':')}`]
      : CONTAINER_MASKED_PATHS.flatMap((path) => ['--tmpfs', `${path}:ro,nosuid,nodev,noexec,size=4k`])),
    '--user',
    `${req.user.uid}:${req.user.gid}`,
    ...(req.limits === null ? ['--pids-limit', String(DEFAULT_PIDS_LIMIT)] : containerLimitArgs(req.limits)),
    ...(req.cpus == null ? [] : ['--cpus', String(req.cpus)]),
    // Only with a memory limit and the worker's watch on it (container-oom.ts): else nothing would end it.
    ...(req.limits !== null && req.holdOnOom === true ? ['--oom-kill-disable'] : []),
    ...(parent === undefined ? [] : ['--cgroup-parent', parent]),
    '--cap-drop=all',
    '--security-opt',
    'no-new-privileges',
    '--hostname',
    'gpu-broker-task',
    ...(req.init ? ['--init'] : []),
    '--volume',
    `${req.taskDir}:${CONTAINER_TASK_DIR}:rw`,
    '--workdir',
    CONTAINER_TASK_DIR,
    '--env-file',
    req.envFile,
  ];
  for (const [name, value] of req.inlineEnv) args.push('--env', `${name}=${value}`);
  if (req.devices.kind === 'cdi') for (const name of req.devices.names) args.push('--device', name);
  else for (const d of req.devices.nodes) args.push('--device', `${d.host}:${d.inside}:rw`);
  args.push(req.image, ...req.argv);
  return args;
}

/**
 * The env file's text and what it cannot carry: the engines read one `NAME=value` per line with the
 * value verbatim, so a value with a line break is passed on the command line instead. The file keeps the
 * rest off the host's process list, where any local user could read them. Pure.
 */
export function envFileText(env: Readonly<Record<string, string>>): {
  text: string;
  inline: Array<[string, string]>;
} {
  const lines: string[] = [];
  const inline: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(env)) {
    if (/[\r\n]/.test(value)) inline.push([name, value]);
    else lines.push(`${name}=${value}`);
  }
  return { text: lines.length === 0 ? '' : `${lines.join('\n')}\n`, inline };
}

/** What the engine knows of a local image. */
export interface LocalImage {
  /** The image id (64 hex). */
  readonly id: string;
  /** Every manifest digest the image is known by (`sha256:…`). */
  readonly digests: readonly string[];
}

/**
 * What to run for `image` given what the engine has locally, or why not: the image must be present, and
 * its digests must include the spec's pinned one (`name@sha256:…`) and the plan's `image_digest`. The
 * container then runs the local image id, so a tag moved after the check cannot change what runs. Pure.
 */
export function imageRunRef(
  image: string,
  planDigest: string | undefined,
  local: LocalImage | null,
  where: { worker: string; engine: ContainerEngine },
): { ok: true; ref: string } | { ok: false; error: string } {
  if (local === null)
    return {
      ok: false,
      error: `image ${image} is not present on worker ${where.worker}: ${where.engine} pull/load it there (the worker never pulls)`,
    };
  const pinned = /@(sha256:[0-9a-f]{64})$/.exec(image)?.[1];
  for (const [want, why] of [
    [pinned, 'the spec pins'],
    [planDigest, 'the policy requires'],
  ] as const) {
    if (want !== undefined && !local.digests.includes(want))
      return {
        ok: false,
        error: `image ${image} on worker ${where.worker} has digest ${local.digests.join(', ') || '(none)'}, not ${want} as ${why}: load the reviewed image`,
      };
  }
  return { ok: true, ref: local.id };
}

/** Asks the engine about `image`; null when it has no such image. Never throws. */
export async function inspectImage(setup: ContainerSetup, image: string): Promise<LocalImage | null> {
  const format =
    setup.engine === 'podman' ? '{{.Id}} {{.Digest}} {{json .RepoDigests}}' : '{{.Id}} {{json .RepoDigests}}';
  const out = await engineOutput(setup, ['image', 'inspect', '--format', format, image]);
  if (out === null) return null;
  const [idWord = '', ...rest] = out.trim().split(' ');
  const id = idWord.replace(/^sha256:/, '');
  if (!/^[0-9a-f]{64}$/.test(id)) return null;
  const digests = new Set<string>();
  for (const m of rest.join(' ').matchAll(/sha256:[0-9a-f]{64}/g)) digests.add(m[0]);
  return { id, digests: [...digests] };
}

/** The names of the containers carrying an execution's label (running or not); null when unknown. */
export async function labelledContainers(
  setup: ContainerSetup,
  executionId: string,
): Promise<string[] | null> {
  const out = await engineOutput(setup, [
    'ps',
    '--all',
    '--filter',
    `label=${CONTAINER_LABEL}=${executionId}`,
    '--format',
    '{{.Names}}',
  ]);
  if (out === null) return null;
  return out
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
}
