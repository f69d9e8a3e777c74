import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ResolvedLimits } from '../../src/contracts/task-limits.js';
import type { NetworkMode } from '../../src/contracts/task-spec.js';
import type { ContainerEngine } from '../../src/contracts/worker-protocol.js';
import { v1Shares } from './cgroups.js';
import type { DeviceNode, SimNodes } from './devices.js';
import { findOnPath, HELPER_ENV, HELPER_PATH } from './helper-commands.js';
import type { TaskUidPool } from './task-uids.js';

/**
 * The container every `container` task runs in (issue 9, docs/security.md "Container tasks"), built by
 * the worker's engine (podman, or docker where podman is missing):
 *
 *   - the image by its local image id, after its digest was checked (imageRunRef), never pulled;
 *   - a read-only root, a private /tmp (tmpfs), no capabilities, no_new_privs, a pids limit;
 *   - no network unless the reviewed spec says `network: "host"`;
 *   - its execution dir at /task (cwd, outputs under /task/out), env as for a sandboxed process task;
 *   - only the leased cards: their device nodes, or CDI names (`nvidia.com/gpu=N`) where the host has
 *     NVIDIA CDI specs, since CDI also brings the driver's libraries into the container;
 *   - a non-root uid: the execution's own task uid on a root worker, else 65534 (nobody);
 *   - a name and a label derived from the execution id, so the box and cleanup can find it.
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

/** The engine a worker runs container tasks with, as probed at start. */
export interface ContainerSetup {
  readonly engine: ContainerEngine;
  /** The engine's executable (absolute). */
  readonly command: string;
  /**
   * The whole environment of every engine command: HELPER_ENV (and CONTAINERS_CONF for podman), never
   * the daemon's nor the spec's; the task's env goes into the container only by the env file and
   * explicit `--env NAME=VALUE` (a bare `--env NAME` would copy the engine's own variable).
   */
  readonly env: Readonly<Record<string, string>>;
  /** Whether the engine has an init (`--init`) that forwards SIGTERM to the task. */
  readonly init: boolean;
  /** Whether the host has NVIDIA CDI specs (nvidia.com/gpu), so cards are passed by CDI name. */
  readonly cdi: boolean;
}

/** How a worker runs `container` tasks; built once at worker start (setup.ts). */
export interface ContainerTasks {
  readonly setup: ContainerSetup;
  /** Per-task uids for a root worker (shared with the bwrap sandbox); null: tasks run as 65534. */
  readonly uids: TaskUidPool | null;
  /** Simulated cards' device nodes (sim workers). */
  readonly simNodes?: SimNodes;
  /** Where the real providers' device nodes are; default /dev. */
  readonly devDir?: string;
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
  /** The task's resource limits, through the engine's own flags (issue 21); null: the pids limit only. */
  readonly limits: ResolvedLimits | null;
  readonly init: boolean;
  /** The task's argv inside the image. */
  readonly argv: readonly string[];
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
 * the device nodes (deviceNodesFor). Pure.
 */
export function cardDevices(
  provider: 'nvidia' | 'hy' | 'sim',
  cdi: boolean,
  indexes: readonly number[],
  nodes: () => DeviceNode[],
): CardDevices {
  if (provider === 'nvidia' && cdi) return { kind: 'cdi', names: indexes.map((i) => `nvidia.com/gpu=${i}`) };
  return { kind: 'nodes', nodes: nodes() };
}

/**
 * The engine's flags for the task's limits (issue 21): memory with no swap beyond it, the pids limit,
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

/** The argv after the engine's executable for one task: `run --rm … IMAGE ARGV…`. Pure. */
export function containerArgs(req: ContainerRequest): string[] {
  const args = [
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
    '--tmpfs',
    `/tmp:rw,nosuid,nodev,mode=1777${req.limits === null ? '' : `,size=${req.limits.tmp_mib}m`}`,
    '--user',
    `${req.user.uid}:${req.user.gid}`,
    ...(req.limits === null ? ['--pids-limit', String(DEFAULT_PIDS_LIMIT)] : containerLimitArgs(req.limits)),
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

/** Runs one engine command; its stdout, or null when it failed. Never throws. */
export function engineOutput(
  setup: ContainerSetup,
  args: string[],
  timeoutMs = 30_000,
): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(setup.command, args, { env: { ...setup.env }, timeout: timeoutMs }, (err, stdout) => {
      resolve(err === null ? String(stdout) : null);
    });
  });
}

/** What `--container-engine` accepts. */
export type ContainerEngineChoice = 'auto' | ContainerEngine | 'none';

/** Parses `--container-engine`; throws for anything else. */
export function parseContainerEngine(text: string): ContainerEngineChoice {
  if (text === 'auto' || text === 'podman' || text === 'docker' || text === 'none') return text;
  throw new Error(`--container-engine ${JSON.stringify(text)}: expected auto, podman, docker or none`);
}

/** The probe's answer: an engine, or none and why. */
export interface ContainerProbe {
  readonly setup: ContainerSetup | null;
  /** One line for the banner: what was found, or why container tasks will wait. */
  readonly detail: string;
}

/** Inputs of `probeContainerEngine`. */
export interface ContainerProbeOptions {
  readonly engine: ContainerEngineChoice;
  /** Where the worker keeps its containers.conf and the probe's empty rootfs (under its data dir). */
  readonly confDir: string;
  /** Search path for the engines; default HELPER_PATH (never the daemon's PATH). */
  readonly path?: string;
  /** Where NVIDIA CDI specs are looked for; default /etc/cdi and /var/run/cdi. */
  readonly cdiDirs?: readonly string[];
  /**
   * The OCI runtimes podman is tried with, in order (null: its default); default the default, then runc.
   * Only tests set it (a runtime that always fails proves the fallback).
   */
  readonly runtimes?: ReadonlyArray<string | null>;
}

/**
 * Finds a working engine: `auto` tries podman, then docker; a named one is tried alone; `none` skips.
 * Podman is proven by starting a container from an empty rootfs (exit 127, "not found", means the
 * runtime set the container up); its default runtime first, then runc. Never throws: a worker without an
 * engine still runs process tasks, and its container tasks wait (`no_container_engine`).
 */
export async function probeContainerEngine(opts: ContainerProbeOptions): Promise<ContainerProbe> {
  if (opts.engine === 'none')
    return {
      setup: null,
      detail: 'no container engine (--container-engine none): container tasks wait for another worker',
    };
  const path = opts.path ?? HELPER_PATH;
  const cdi = hasNvidiaCdi(opts.cdiDirs ?? ['/etc/cdi', '/var/run/cdi']);
  const tried: string[] = [];
  if (opts.engine !== 'docker') {
    const podman = await probePodman(opts.confDir, path, cdi, opts.runtimes);
    if ('setup' in podman) return podman;
    tried.push(podman.why);
  }
  if (opts.engine !== 'podman') {
    const docker = await probeDocker(path, cdi);
    if ('setup' in docker) return docker;
    tried.push(docker.why);
  }
  return {
    setup: null,
    detail: `no container engine (${tried.join('; ')}): container tasks wait for a worker that has one`,
  };
}

async function probePodman(
  confDir: string,
  path: string,
  cdi: boolean,
  runtimes: ReadonlyArray<string | null> | undefined,
): Promise<ContainerProbe | { why: string }> {
  const podman = findOnPath('podman', path);
  if (podman === null) return { why: 'podman is not installed: apt-get install podman runc' };
  const runc = findOnPath('runc', path);
  const conf = join(confDir, 'containers.conf');
  const failures: string[] = [];
  for (const runtime of runtimes ?? [null, ...(runc === null ? [] : [runc])]) {
    try {
      mkdirSync(confDir, { recursive: true, mode: 0o700 });
      writeFileSync(conf, containersConf(runtime), { mode: 0o600 });
    } catch (err) {
      return { why: `cannot write ${conf}: ${(err as Error).message}` };
    }
    const setup: ContainerSetup = {
      engine: 'podman',
      command: podman,
      env: { ...HELPER_ENV, CONTAINERS_CONF: conf },
      init: catatonitPresent(),
      cdi,
    };
    const failure = await tryEmptyRootfs(setup, confDir);
    if (failure === null) {
      const how = runtime === null ? 'its default runtime' : `runtime ${runtime}`;
      return {
        setup,
        detail: `container tasks: podman (${podman}, ${how}, ${conf})${cdi ? ', NVIDIA cards by CDI' : ''}`,
      };
    }
    failures.push(`${runtime ?? 'default runtime'}: ${failure}`);
  }
  return {
    why: `podman cannot start a container here (${failures.join('; ')})${runc === null ? '; installing runc may help' : ''}`,
  };
}

async function probeDocker(path: string, cdi: boolean): Promise<ContainerProbe | { why: string }> {
  const docker = findOnPath('docker', path);
  if (docker === null) return { why: 'docker is not installed' };
  const setup: ContainerSetup = {
    engine: 'docker',
    command: docker,
    env: { ...HELPER_ENV },
    init: true,
    cdi,
  };
  const version = await engineOutput(setup, ['info', '--format', '{{.ServerVersion}}'], 10_000);
  if (version === null) return { why: `docker (${docker}) has no reachable daemon` };
  return {
    setup,
    detail: `container tasks: docker ${version.trim()} (${docker})${cdi ? ', NVIDIA cards by CDI' : ''}`,
  };
}

/** The worker's containers.conf: no default ulimits (raising them is refused here), the runtime if chosen. */
export function containersConf(runtime: string | null): string {
  return [
    '# Written by the gpu-broker worker; every podman it runs reads this file (CONTAINERS_CONF).',
    '[containers]',
    'default_ulimits = []',
    ...(runtime === null ? [] : ['', '[engine]', `runtime = ${JSON.stringify(runtime)}`]),
    '',
  ].join('\n');
}

/** Starts a container from an empty rootfs; null when the runtime got as far as exec (exit 127). */
async function tryEmptyRootfs(setup: ContainerSetup, dir: string): Promise<string | null> {
  let rootfs: string | null = null;
  try {
    rootfs = await mkdtemp(join(dir, 'probe-rootfs-'));
    const args = ['run', '--rm', '--network', 'none', '--read-only', '--rootfs', rootfs, '/gpu-broker-probe'];
    return await new Promise<string | null>((resolve) => {
      execFile(setup.command, args, { env: { ...setup.env }, timeout: 30_000 }, (err, _out, stderr) => {
        const code = err === null ? 0 : (err as { code?: unknown }).code;
        if (code === 127) resolve(null);
        else resolve(String(stderr).trim().split('\n').pop() || `exit ${String(code)}`);
      });
    });
  } catch (err) {
    return (err as Error).message;
  } finally {
    if (rootfs !== null) await rm(rootfs, { recursive: true, force: true }).catch(() => undefined);
  }
}

function catatonitPresent(): boolean {
  return ['/usr/libexec/podman/catatonit', '/usr/bin/catatonit', '/usr/local/libexec/podman/catatonit'].some(
    (p) => existsSync(p),
  );
}

/** Whether any CDI spec in `dirs` describes NVIDIA GPUs (`nvidia.com/gpu`). */
export function hasNvidiaCdi(dirs: readonly string[]): boolean {
  for (const dir of dirs) {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      if (!/\.(ya?ml|json)$/.test(name)) continue;
      try {
        if (readFileSync(join(dir, name), 'utf8').includes('nvidia.com/gpu')) return true;
      } catch {
        // unreadable: not ours to use
      }
    }
  }
  return false;
}
