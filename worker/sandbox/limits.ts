import type { EnforcedLimits, ResolvedLimits } from '../../src/contracts/task-limits.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { CgroupHierarchy, CgroupReadBack, TaskCgroup } from './cgroups.js';
import { diskUse, removeTaskDir } from './task-dir.js';
import { mountTaskFs, roomMissing, type TaskFs, type TaskFsTools } from './task-fs.js';

/**
 * One sandboxed task's resource limits on this host (docs/security.md "Resource limits"):
 *
 *   memory, pids, cpu   the task's own cgroup (cgroups.ts), entered by the sandbox's first process
 *                       before it runs any of the task's code; OOM kills read from the kernel
 *   /tmp, /dev/shm      bwrap `--size` on their tmpfs (bwrap.ts); writes past it fail with ENOSPC
 *   task dir            a file system of its own sized by the limit (task-fs.ts: the kernel counts and
 *                       bounds every byte, unlinked and preallocated ones too) where the worker is
 *                       root with mkfs.ext4, else a walk of the dir's allocated blocks; either way a
 *                       watchdog (taskDirGuard) ends the task (DISK_LIMIT) past the limit;
 *                       docs/decisions/0021-task-limits.md and 0043-task-file-systems.md say why
 *   scratch             the task dir is removed once the task's processes are gone
 *
 * A container task (containerTaskLimits) gets memory, pids, cpu and the tmpfs sizes from the engine's
 * flags (container.ts) and the same task-dir watch and removal (taskDirGuard); the watch also ends a
 * container held at its memory limit as OUT_OF_MEMORY (container-oom.ts).
 *
 * What is enforced, and how, is reported with the exit (`detail`), limit by limit: the cgroup's values
 * as the kernel reads them back (null, "not read back", where a file could not be read).
 */

const MIB = 1024 * 1024;
/** How often the task dir is measured. */
export const DISK_WATCH_MS = 1000;
/** Most entries one measurement walks; past it the task is over its limit (a dir of a million files is abuse). */
export const DISK_WATCH_MAX_ENTRIES = 200_000;

/** Why a task ended because of its limits. */
export interface LimitBreach {
  readonly reason: 'OUT_OF_MEMORY' | 'DISK_LIMIT';
  readonly detail: string;
}

/** The limits of one running task; see the module comment. */
export interface TaskLimits {
  readonly limits: ResolvedLimits;
  /** Puts `pid` (not yet running the task's code) into the task's cgroup; returns why it could not. */
  confine(pid: number): Promise<string | null>;
  /**
   * The task's cgroup directories (one on v2, one per controller on v1; none without a cgroup): the native
   * sandbox moves itself into them before anything else (`--cgroup-procs`), instead of `confine`.
   */
  readonly cgroupDirs: readonly string[];
  /** Starts the disk watch; `kill` ends the task when it is over. */
  watch(kill: () => void): void;
  /** After the task's exit: the limit it broke, or null. */
  breach(): Promise<LimitBreach | null>;
  /** Processes still in the task's cgroup (empty without one). */
  procs(): Promise<number[]>;
  /**
   * True when the task has a cgroup of its own that every process of it is born in (`confine` moves the
   * box before it runs anything) and none can leave (the task has no capability and no write access to
   * another cgroup): then `procs` lists all of it, and the box need not walk /proc for its namespace.
   */
  readonly contained: boolean;
  /** Kills what is left in the cgroup (a process that escaped the PID namespace cannot escape it). */
  killAll(): Promise<void>;
  /** What was enforced, limit by limit. */
  enforced(): EnforcedLimits;
  /** Stops the watch, removes the cgroup and the task dir; never throws. */
  release(): Promise<void>;
}

/** What setting up a task's limits needs. */
export interface TaskLimitsRequest {
  readonly executionId: string;
  readonly limits: ResolvedLimits;
  /** The plan's `cpus` (the spec's `limits.cpus`): a CPU quota on the task's cgroup; null or absent: none. */
  readonly cpus?: number | null;
  /** The host's hierarchy, or null where the worker could not find a writable one (reported as such). */
  readonly cgroups: CgroupHierarchy | null;
  /** The host dir at /task: watched, then removed. */
  readonly taskDir: string;
  /**
   * Give the task dir a file system of its own (task-fs.ts): the tools, the execution's dir (where the
   * image goes) and the task dir's owner. Absent: the dir is walked instead.
   */
  readonly taskFs?: {
    readonly tools: TaskFsTools;
    readonly execRoot: string;
    readonly owner: { readonly uid: number; readonly gid: number } | null;
  };
}

/** Creates the task's cgroup and prepares the watch; returns why it could not (SETUP_FAILED). */
export async function setupTaskLimits(req: TaskLimitsRequest): Promise<TaskLimits | string> {
  const { limits } = req;
  const made = await createTaskCgroup(req);
  if (typeof made === 'string') return made;
  const { cgroup, kernel } = made;
  // The task dir's own file system, mounted before anything of the task runs; where it cannot be made,
  // the walk, and the report says why.
  let fs: TaskFs | null = null;
  let fsProblem: string | null = null;
  if (req.taskFs !== undefined) {
    const mounted = await mountTaskFs(req.taskFs.tools, {
      execRoot: req.taskFs.execRoot,
      taskDir: req.taskDir,
      diskMib: limits.disk_mib,
      owner: req.taskFs.owner,
    });
    if (typeof mounted === 'string' && roomMissing(mounted)) {
      await cgroup?.remove();
      return mounted;
    }
    if (typeof mounted === 'string') fsProblem = mounted;
    else fs = mounted;
  }
  const guard = taskDirGuard(req.taskDir, limits.disk_mib, null, fs);
  return {
    limits,
    confine: async (pid) => {
      if (cgroup === null) return null;
      try {
        await cgroup.add(pid);
        return null;
      } catch (err) {
        return `cannot move the task into its cgroup: ${errorMessage(err)}`;
      }
    },
    cgroupDirs: cgroup?.dirs ?? [],
    watch: guard.watch,
    breach: async () => {
      guard.stop();
      const watched = guard.breach();
      if (watched !== null) return watched;
      if (cgroup !== null && (await cgroup.oomKills()) > 0)
        return {
          reason: 'OUT_OF_MEMORY',
          detail: `the task went over its memory limit of ${limits.memory_mib} MiB (${req.cgroups?.describe}) and the kernel killed it`,
        };
      return null;
    },
    procs: async () => (cgroup === null ? [] : cgroup.procs()),
    contained: cgroup !== null,
    killAll: async () => cgroup?.killAll(),
    enforced: () => ({
      ...enforcedLimits(limits, req.cgroups, cgroup !== null, kernel),
      ...tmpfsAndDisk(limits, fs ?? fsProblem),
      ...cpusEnforced(req.cpus ?? null, req.cgroups, cgroup !== null, kernel),
    }),
    release: async () => {
      guard.stop();
      if (cgroup !== null) {
        await cgroup.killAll();
        await cgroup.remove();
      }
      await guard.remove();
    },
  };
}

/** What a container task's limits need: the engine enforces memory, pids and cpu (container.ts). */
export interface ContainerLimitsRequest {
  readonly limits: ResolvedLimits;
  /** The plan's `cpus`: the engine's `--cpus`; null or absent: none. */
  readonly cpus?: number | null;
  /** The host dir at /task: watched, then removed. */
  readonly taskDir: string;
  /** The engine, for the report: `podman`, `docker`. */
  readonly engine: string;
  /**
   * Whether the container is at its memory limit now (sandbox/container-oom.ts); null where the host
   * gives no way to tell (the exit then reads as a signal death).
   */
  readonly underOom: (() => Promise<boolean>) | null;
  /**
   * The task's own cgroup v2 the container runs below (container-cgroup.ts): after the exit its OOM
   * counter decides OUT_OF_MEMORY (the container's cgroup is gone by then), and it is removed at release.
   */
  readonly parent?: { readonly cgroup: TaskCgroup; readonly describe: string } | null;
  /** The task dir's own file system (task-fs.ts), mounted by the caller; or why it could not be. */
  readonly fs?: TaskFs | string | null;
}

/**
 * The limits of a container task: the engine's flags hold memory, pids and cpu; the task dir is watched
 * and removed exactly as a sandboxed task's (taskDirGuard); a container found at its memory limit by
 * the same watch is ended as OUT_OF_MEMORY (container.ts says how the engine holds it there).
 */
export function containerTaskLimits(req: ContainerLimitsRequest): TaskLimits {
  const { limits, underOom } = req;
  const parent = req.parent ?? null;
  const memory: (() => Promise<LimitBreach | null>) | null =
    underOom === null
      ? null
      : async () =>
          (await underOom())
            ? {
                reason: 'OUT_OF_MEMORY',
                detail: `the task went over its memory limit of ${limits.memory_mib} MiB (${req.engine} --memory) and the worker ended it`,
              }
            : null;
  const fs = typeof req.fs === 'object' ? req.fs : null;
  const guard = taskDirGuard(req.taskDir, limits.disk_mib, memory, fs);
  const by = `${req.engine} flags`;
  return {
    limits,
    confine: async () => null,
    cgroupDirs: [],
    watch: guard.watch,
    breach: async () => {
      guard.stop();
      const watched = guard.breach();
      if (watched !== null || parent === null) return watched;
      return (await parent.cgroup.oomKills().catch(() => 0)) > 0
        ? {
            reason: 'OUT_OF_MEMORY',
            detail: `the task went over its memory limit of ${limits.memory_mib} MiB (${req.engine} --memory, in its own ${parent.describe} cgroup) and the kernel killed it`,
          }
        : null;
    },
    procs: async () => [],
    contained: false,
    killAll: async () => undefined,
    enforced: () => ({
      memory_mib: {
        value: limits.memory_mib,
        by: `${by} (--memory, --memory-swap)${parent === null ? '' : ` below the task's own ${parent.describe} cgroup`}`,
      },
      pids: { value: limits.pids, by: `${by} (--pids-limit)` },
      cpu_weight: { value: limits.cpu_weight, by: `${by} (--cpu-shares)` },
      ...(req.cpus == null ? {} : { cpus: { value: req.cpus, by: `${by} (--cpus)` } }),
      ...tmpfsAndDisk(limits, req.fs ?? null),
    }),
    release: async () => {
      guard.stop();
      if (parent !== null) {
        await parent.cgroup.killAll();
        await parent.cgroup.remove();
      }
      await guard.remove();
    },
  };
}

function tmpfsAndDisk(
  limits: ResolvedLimits,
  fs: TaskFs | string | null = null,
): Pick<EnforcedLimits, 'tmp_mib' | 'shm_mib' | 'disk_mib'> {
  return {
    tmp_mib: { value: limits.tmp_mib, by: 'tmpfs size' },
    shm_mib: { value: limits.shm_mib, by: 'tmpfs size' },
    disk_mib: {
      value: limits.disk_mib,
      by:
        fs !== null && typeof fs === 'object'
          ? fs.by
          : `watchdog every ${DISK_WATCH_MS} ms${typeof fs === 'string' ? ` (no file system of its own: ${fs})` : ''}`,
    },
  };
}

/**
 * The task's cgroup with its limits, and what the kernel has of them; no cgroup where the worker has no
 * writable hierarchy. Returns why it could not be made.
 */
async function createTaskCgroup(
  req: TaskLimitsRequest,
): Promise<{ cgroup: TaskCgroup | null; kernel: CgroupReadBack } | string> {
  const { limits } = req;
  let cgroup: TaskCgroup | null = null;
  // What the kernel has, read back once made: the report says what is enforced, not what was asked.
  let kernel: CgroupReadBack = { memoryBytes: null, pids: null, cpuWeight: null };
  if (req.cgroups !== null) {
    try {
      cgroup = await req.cgroups.create(req.executionId, {
        memoryBytes: limits.memory_mib * MIB,
        pids: limits.pids,
        cpuWeight: limits.cpu_weight,
        cpus: req.cpus ?? null,
      });
      kernel = await cgroup.readBack();
    } catch (err) {
      await cgroup?.remove();
      return `cannot create the task's cgroup (${req.cgroups.describe}): ${errorMessage(err)}`;
    }
  }
  return { cgroup, kernel };
}

/** The task dir's watch and its removal at the end, shared by every kind of box that has limits. */
interface TaskDirGuard {
  /** Starts the watch; `kill` ends the task once a limit is broken. */
  watch(kill: () => void): void;
  /** The limit the watch saw broken, or null. */
  breach(): LimitBreach | null;
  stop(): void;
  /** Removes the task dir (scratch); never throws. */
  remove(): Promise<void>;
}

/**
 * Measures `taskDir` every DISK_WATCH_MS and, past `diskMib`, ends the task (DISK_LIMIT); `also` is one
 * more check per tick (a container's memory state).
 */
function taskDirGuard(
  taskDir: string,
  diskMib: number,
  also: (() => Promise<LimitBreach | null>) | null,
  fs: TaskFs | null = null,
): TaskDirGuard {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let seen: LimitBreach | null = null;
  const diskCheck = async (): Promise<LimitBreach | null> => {
    // On a file system of its own: the kernel's count, every byte the task holds there included.
    const used =
      fs !== null
        ? { bytes: await fs.used(), truncated: false }
        : await diskUse(taskDir, DISK_WATCH_MAX_ENTRIES);
    const unmeasured = ('unmeasured' in used ? used.unmeasured : undefined) ?? null;
    if (used.bytes <= diskMib * MIB && !used.truncated && unmeasured === null) return null;
    return {
      reason: 'DISK_LIMIT',
      detail:
        unmeasured !== null
          ? `the task dir holds what the watch cannot measure (${unmeasured}; disk limit ${diskMib} MiB)`
          : used.truncated
            ? `the task dir holds more than ${DISK_WATCH_MAX_ENTRIES} entries (disk limit ${diskMib} MiB)`
            : `the task dir reached ${Math.ceil(used.bytes / MIB)} MiB, over its disk limit of ${diskMib} MiB`,
    };
  };
  return {
    watch: (kill) => {
      const tick = async () => {
        const found = (await diskCheck()) ?? (also === null ? null : await also());
        if (stopped) return;
        if (found !== null) {
          seen = found;
          kill();
          return;
        }
        timer = setTimeout(() => void tick(), DISK_WATCH_MS);
      };
      timer = setTimeout(() => void tick(), DISK_WATCH_MS);
    },
    breach: () => seen,
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
    remove: async () => {
      await fs?.release();
      await removeTaskDir(taskDir);
    },
  };
}

/** What is enforced, limit by limit: the cgroup's values as the kernel read them back. */
function enforcedLimits(
  limits: ResolvedLimits,
  cgroups: CgroupHierarchy | null,
  hasCgroup: boolean,
  kernel: CgroupReadBack,
): EnforcedLimits {
  const by = cgroups?.describe ?? 'not enforced: no writable cgroup hierarchy on this worker';
  const viaCgroup = (value: number | null) =>
    !hasCgroup || value !== null ? { value, by } : { value, by: `${by}: set, but not read back` };
  return {
    memory_mib: viaCgroup(kernel.memoryBytes === null ? null : Math.floor(kernel.memoryBytes / MIB)),
    pids: viaCgroup(kernel.pids),
    cpu_weight: viaCgroup(kernel.cpuWeight),
    ...tmpfsAndDisk(limits),
  };
}

/**
 * The CPU quota as enforced, when the plan asked for one: the kernel's reading of the task's cgroup, or
 * why it is not enforced (no writable hierarchy).
 */
function cpusEnforced(
  cpus: number | null,
  cgroups: CgroupHierarchy | null,
  hasCgroup: boolean,
  kernel: CgroupReadBack,
): Pick<EnforcedLimits, 'cpus'> {
  if (cpus === null) return {};
  if (cgroups === null || !hasCgroup)
    return { cpus: { value: null, by: 'not enforced: no writable cgroup hierarchy on this worker' } };
  const read = kernel.cpus ?? null;
  return {
    cpus:
      read === null
        ? { value: cpus, by: `${cgroups.describe} cpu quota: set, but not read back` }
        : { value: read, by: `${cgroups.describe} cpu quota` },
  };
}

/** One line for the exit's detail: `limits enforced: memory 512 MiB (cgroup v1 …), …`. */
export function describeEnforced(e: EnforcedLimits): string {
  const parts: string[] = [];
  const unit = (name: string) =>
    name === 'pids' || name === 'cpu_weight' ? '' : name === 'cpus' ? ' CPUs' : ' MiB';
  for (const [name, v] of Object.entries(e)) {
    if (v === undefined) continue;
    parts.push(v.value === null ? `${name} ${v.by}` : `${name} ${v.value}${unit(name)} (${v.by})`);
  }
  return `limits enforced: ${parts.join(', ')}`;
}
