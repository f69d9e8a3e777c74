import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ContainerEngine } from '../../src/contracts/worker-protocol.js';
import { memoryIsV1 } from './cgroups.js';
import { findOnPath, HELPER_ENV, HELPER_PATH } from './helper-commands.js';

/**
 * Finding the worker's container engine at start (container.ts for what a task's container is): podman
 * proven by a throwaway container, else docker with a reachable daemon; and the runner of every engine
 * command the worker issues.
 */

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
  /**
   * Memory is a cgroup v1 controller here: a container with limits runs with `--oom-kill-disable`, so
   * that the worker sees it held at its limit and reports OUT_OF_MEMORY (container-oom.ts).
   */
  readonly holdOnOom?: boolean;
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
      holdOnOom: memoryV1Here(),
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
    holdOnOom: memoryV1Here(),
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

function memoryV1Here(): boolean {
  try {
    return memoryIsV1(readFileSync('/proc/self/mountinfo', 'utf8'));
  } catch {
    return false;
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
