import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { IsolationMode } from '../../src/contracts/worker-protocol.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import { SimSampler } from '../samplers/sim-sampler.js';
import type { SystemMounts } from './bwrap.js';
import { probeBwrap, systemMounts } from './bwrap.js';
import { type CgroupHierarchy, probeCgroups } from './cgroups.js';
import type { ContainerEngineChoice, ContainerTasks } from './container.js';
import { NOBODY, probeContainerEngine } from './container.js';
import type { SimNodes } from './devices.js';
import { makeSimDeviceNodes } from './devices.js';
import { findHelper } from './helper-commands.js';
import { type NativeProbe, probeNativeSandbox, type SandboxEngineChoice } from './native.js';
import { hostSeccompArch, SECCOMP_GROUPS, seccompProgram, seccompVersion } from './seccomp.js';
import { probeTaskFs, type TaskFsTools } from './task-fs.js';
import type { UidRange } from './task-uids.js';
import { DEFAULT_TASK_UIDS, HOST_TASK_UIDS, TASK_UIDS_STATE, TaskUidPool } from './task-uids.js';

/**
 * Chooses how a worker isolates its tasks (`--isolation auto|bwrap|none`) and prepares what the
 * sandbox needs once, at start: the bwrap and setpriv executables, the uid range for a root worker, the
 * simulated cards' device nodes, the host's system tree and the paths to hide.
 *
 *   auto   bubblewrap when it works here; otherwise start fails and says which package to install.
 *   bwrap  the same, said explicitly.
 *   none   no sandbox: tasks run as plain process groups (as `--run-as USER` when given). Loud: the hello
 *          says so, the master marks the worker UNISOLATED and, under `policy.require_isolation`
 *          (default), places no task on it.
 */

/** How a worker isolates `process` tasks; built once at worker start. */
export type SandboxSetup =
  | { readonly kind: 'none' }
  | {
      readonly kind: 'bwrap';
      /** The bwrap executable. */
      readonly bwrap: string;
      /** setpriv, when the worker is root (each task then gets its own uid from `uids`). */
      readonly setpriv: string | null;
      /**
       * The native sandbox (native.ts, ADR 0038) that a root worker starts each task with instead of
       * bwrap + setpriv + env; null: bwrap. Same layout, namespaces and status; one program.
       */
      readonly native?: string | null;
      /** env (absolute): sets the task's env after setpriv's uid drop (bwrap.ts). */
      readonly envHelper: string;
      /**
       * bash (absolute): behind setpriv, reads the task's env from its file and execs env with it, so
       * no value is on a command line (bwrap.ts TASK_ENV_FILE); absent or null: env's command line.
       */
      readonly shell?: string | null;
      /** Per-task uids for a root worker; null when bwrap runs unprivileged. */
      readonly uids: TaskUidPool | null;
      /** Host paths no task may see (the data dirs); /root, /home and the plan's list are added. */
      readonly hiddenPaths: readonly string[];
      /** Simulated cards' device nodes (sim workers). */
      readonly simNodes?: SimNodes;
      /** Where the real providers' device nodes are; default /dev (tests point it at fake nodes). */
      readonly devDir?: string;
      /** Tests: the driver's MIG capability minors file (default /proc/driver/nvidia-caps/mig-minors). */
      readonly migMinorsPath?: string;
      /** The host's system directories, as bound into every sandbox (bwrap.ts systemMounts()). */
      readonly system: SystemMounts;
      /**
       * Where each task's cgroup is made (cgroups.ts; memory, pids and cpu limits); null where this host
       * has no writable hierarchy (a worker that is not root): those limits are then reported as not enforced.
       */
      readonly cgroups?: CgroupHierarchy | null;
      /**
       * The syscall filter every task runs under (seccomp.ts); absent or null: none (a
       * host architecture the table is not written for, or a test's own setup).
       */
      readonly seccomp?: TaskSeccomp | null;
      /**
       * A file system of its own for each task's dir, sized by its disk limit (task-fs.ts, ADR
       * 0043); absent or null: the dir is walked instead (a worker that is not root, no mkfs.ext4).
       */
      readonly taskFs?: TaskFsTools | null;
    };

/** The syscall filter as a worker holds it. */
export interface TaskSeccomp {
  /** The BPF program (struct sock_filter[]). */
  readonly program: Buffer;
  /** seccompVersion(program): what the hello and the dashboard show. */
  readonly version: string;
  /** The table's groups the operator allowed again (`--seccomp-allow`). */
  readonly allowed: readonly string[];
  /** The program as a file in the worker's data dir, for bwrap's `--seccomp FD` (opened per task). */
  readonly file: string;
}

/** What `--isolation` accepts. */
export type IsolationChoice = 'auto' | IsolationMode;

/** Inputs of `prepareSandbox`. */
export interface SandboxChoice {
  readonly isolation: IsolationChoice;
  /** The worker's data dir: hidden from tasks, and where sim device nodes are made. */
  readonly dataDir: string;
  /** More host paths to hide (e.g. the master's data dir when both run on this host). */
  readonly hiddenPaths?: readonly string[];
  /** The worker's sampler: a sim sampler's cards get device nodes. */
  readonly sampler: CardSampler;
  /** Uid range for tasks of a root worker; default DEFAULT_TASK_UIDS. */
  readonly taskUids?: UidRange;
  /** The host-wide task uid counter (task-uids.ts); default HOST_TASK_UIDS (tests point it elsewhere). */
  readonly taskUidRegistry?: string;
  /** Whether the worker runs as root; default: asks the process. */
  readonly root?: boolean;
  /** Where nvidia/hy device nodes are looked up; default /dev (tests with a fake nvidia-smi/hy-smi). */
  readonly devDir?: string;
  /** The engine for `container` tasks (`--container-engine`); default none (the CLIs default to auto). */
  readonly containerEngine?: ContainerEngineChoice;
  /** The cgroup hierarchy for task limits; default: probed (cgroups.ts probeCgroups); null: none. */
  readonly cgroups?: CgroupHierarchy | null;
  /** What builds a root worker's sandboxes (`--sandbox-engine`, native.ts); default auto. */
  readonly sandboxEngine?: SandboxEngineChoice;
  /** The native sandbox's executable; default nativeSandboxPath() (tests). */
  readonly nativeSandbox?: string;
  /** Groups of the syscall filter's table to allow again (`--seccomp-allow`); default none. */
  readonly seccompAllow?: readonly string[];
  /** Per-task file systems for the disk limit; default: probed when root (task-fs.ts); null: none. */
  readonly taskFs?: TaskFsTools | null;
}

/** The prepared isolation. */
export interface PreparedSandbox {
  readonly isolation: IsolationMode;
  readonly setup: SandboxSetup;
  /** One line for the worker's banner. */
  readonly summary: string;
  /** How `container` tasks run; absent when no engine works here (they then wait for another worker). */
  readonly containers?: ContainerTasks;
  /** One line for the banner: the engine, or none and that container tasks will wait. */
  readonly containerSummary: string;
}

/** Thrown when the chosen isolation cannot work here; the message says what to install or pass. */
export class IsolationUnavailableError extends Error {}

/** Parses `--isolation`; throws for anything else. */
export function parseIsolation(text: string): IsolationChoice {
  if (text === 'auto' || text === 'bwrap' || text === 'none') return text;
  throw new Error(`--isolation ${JSON.stringify(text)}: expected auto, bwrap or none`);
}

/** Prepares the sandbox; see the module comment. */
export async function prepareSandbox(choice: SandboxChoice): Promise<PreparedSandbox> {
  const root = choice.root ?? process.getuid?.() === 0;
  const range = choice.taskUids ?? DEFAULT_TASK_UIDS;
  // One pool for both kinds of task, so a process task and a container task never share a uid.
  // Never reused (task-uids.ts): the next unused uid is kept in the data dir across restarts.
  // Reserved through the host's counter too (task-uids.ts): two root workers on this host never give
  // two tasks one uid, whatever their data dirs and ranges.
  const uids = root
    ? new TaskUidPool(range, join(choice.dataDir, TASK_UIDS_STATE), choice.taskUidRegistry ?? HOST_TASK_UIDS)
    : null;
  const engine = await probeContainerEngine({
    engine: choice.containerEngine ?? 'none',
    confDir: join(choice.dataDir, 'containers'),
  });
  let nodes: SimNodes | undefined;
  const simNodes = async () => {
    if (!(choice.sampler instanceof SimSampler)) return undefined;
    nodes ??= await makeSimDeviceNodes(
      join(choice.dataDir, 'devices'),
      choice.sampler.count,
      root,
      choice.sampler.capabilityMinors(),
    );
    return nodes;
  };
  const containers = async (
    cgroups: CgroupHierarchy | null = null,
    taskFs: TaskFsTools | null = null,
  ): Promise<Pick<PreparedSandbox, 'containers' | 'containerSummary'>> => {
    if (engine.setup === null) return { containerSummary: engine.detail };
    const sim = await simNodes();
    return {
      containerSummary: `${engine.detail}; each runs as ${root ? `its own uid from ${range.first}-${range.last}` : `uid ${NOBODY}`}`,
      containers: {
        setup: engine.setup,
        uids,
        // cgroup v2: a podman task's container goes below the task's own cgroup (container-cgroup.ts).
        ...(cgroups?.version === 2 ? { cgroups } : {}),
        ...(taskFs === null ? {} : { taskFs }),
        ...(sim === undefined ? {} : { simNodes: sim }),
        ...(choice.devDir === undefined ? {} : { devDir: choice.devDir }),
      },
    };
  };
  if (choice.isolation === 'none') {
    return {
      isolation: 'none',
      setup: { kind: 'none' },
      summary:
        'UNISOLATED (--isolation none): tasks run as plain processes that can see this host; the master places no task here unless policy.require_isolation is false',
      ...(await containers()),
    };
  }
  const probe = await probeBwrap({ root });
  if (!probe.ok || probe.bwrap === null || probe.env === null) {
    throw new IsolationUnavailableError(
      `cannot sandbox tasks: ${probe.detail}. Install it, or start the worker with --isolation none (tasks then run unsandboxed and the master marks this worker UNISOLATED)`,
    );
  }
  const system = systemMounts();
  const sandboxEngine = choice.sandboxEngine ?? 'auto';
  const native =
    sandboxEngine === 'bwrap'
      ? null
      : await probeNativeSandbox({
          root,
          system,
          // The highest uid a task may get: a sandbox that cannot run it must not be chosen.
          uid: range.last,
          ...(choice.nativeSandbox === undefined ? {} : { path: choice.nativeSandbox }),
        });
  if (sandboxEngine === 'native' && native?.path == null)
    throw new IsolationUnavailableError(
      `--sandbox-engine native: ${native?.detail ?? 'not probed'}. Build it (npm run build, with gcc installed), or start the worker with --sandbox-engine bwrap`,
    );
  const sim = await simNodes();
  const cgroups = choice.cgroups === undefined ? await probeCgroups({ root }) : choice.cgroups;
  const seccomp = prepareSeccomp(choice.dataDir, choice.seccompAllow ?? []);
  const taskFs = choice.taskFs !== undefined ? choice.taskFs : await probeTaskFs(choice.dataDir, root);
  const diskLine =
    taskFs === null || typeof taskFs === 'string'
      ? `task dir disk limit by a watch (no file system of its own: ${taskFs ?? 'turned off'})`
      : 'task dir disk limit by a file system of its own';
  const limitsLine =
    cgroups === null
      ? `no writable cgroups: memory, pids and cpu limits NOT enforced; ${diskLine}`
      : `limits through ${cgroups.describe}; ${diskLine}`;
  return {
    ...(await containers(cgroups, typeof taskFs === 'string' ? null : taskFs)),
    isolation: 'bwrap',
    setup: {
      kind: 'bwrap',
      bwrap: probe.bwrap,
      setpriv: root ? probe.setpriv : null,
      native: native?.path ?? null,
      envHelper: probe.env,
      shell: root ? findHelper('bash') : null,
      uids,
      hiddenPaths: [choice.dataDir, ...(choice.hiddenPaths ?? [])],
      system,
      cgroups,
      seccomp,
      taskFs: typeof taskFs === 'string' ? null : taskFs,
      ...(sim === undefined ? {} : { simNodes: sim }),
      ...(choice.devDir === undefined ? {} : { devDir: choice.devDir }),
    },
    summary: root
      ? `sandboxed: ${engineLine(probe.detail, native)}; each task gets its own uid from ${range.first}-${range.last}; ${limitsLine}; ${seccompLine(seccomp)}`
      : `sandboxed: ${probe.detail} in a user namespace (tasks keep this worker's uid on the host); ${limitsLine}; ${seccompLine(seccomp)}`,
  };
}

/**
 * The syscall filter for this host (null where the table has no numbers for its architecture), written
 * once into the data dir (0600: bwrap reads it through a descriptor the launcher opens per task). An
 * unknown group in `allow` stops the start: a typo must not silently leave the filter as it was.
 */
export function prepareSeccomp(dataDir: string, allow: readonly string[]): TaskSeccomp | null {
  const unknown = allow.filter((g) => !SECCOMP_GROUPS.includes(g));
  if (unknown.length > 0)
    throw new IsolationUnavailableError(
      `--seccomp-allow ${unknown.join(',')}: not a group of the syscall filter (one of ${SECCOMP_GROUPS.join(', ')})`,
    );
  const arch = hostSeccompArch();
  if (arch === null) return null;
  const program = seccompProgram(arch, allow);
  const version = seccompVersion(program);
  const file = join(dataDir, `seccomp-${version}.bpf`);
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(file, program, { mode: 0o600 });
  return { program, version, allowed: [...allow], file };
}

/** The banner's words for the filter. */
function seccompLine(s: TaskSeccomp | null): string {
  if (s === null) return `NO syscall filter (no table for ${process.arch})`;
  return `syscall filter ${s.version}${s.allowed.length > 0 ? ` (allowed again: ${s.allowed.join(', ')})` : ''}`;
}

/** What builds a root worker's sandboxes, for the banner: the native sandbox, or bwrap and why not the other. */
function engineLine(bwrapDetail: string, native: NativeProbe | null): string {
  if (native?.path != null) return `${native.detail} (bwrap's layout, one program per task)`;
  return native === null ? bwrapDetail : `${bwrapDetail} (not the native sandbox: ${native.detail})`;
}
