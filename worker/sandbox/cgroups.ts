import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rmdir, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { readKernelFile, writeKernelFile } from './kernel-files.js';
import { below, parseMountinfo, parseSelfCgroup } from './mountinfo.js';

/**
 * Per-task cgroups (docs/decisions/0021-task-limits.md): one interface over cgroup v2 (the
 * unified hierarchy current GPU hosts run) and v1 (a controller per mount; this CI host is a v1/v2
 * hybrid with v1 memory, pids and cpu). The worker probes the host once (probeCgroups), then for each
 * task creates a cgroup below its own, sets the limits, moves the task's first process in before it
 * runs any of the task's code (local/bwrap-box.ts), reads OOM kills from the kernel's counter and, at
 * teardown, kills what is left in it and removes it.
 *
 * Where: below the worker's own cgroup (from /proc/self/cgroup), in `gpu-broker/<execution_id>`, so
 * whatever limits the host put on the worker also bound its tasks. On v2 a cgroup with processes may
 * not hand controllers to children ("no internal processes"): the worker then moves itself into a leaf
 * `gpu-broker-worker` of its cgroup first (systemd: run it with Delegate=yes).
 */

/** The limits a cgroup enforces. */
export interface CgroupLimits {
  readonly memoryBytes: number;
  readonly pids: number;
  /** cgroup v2 cpu.weight scale (1 to 10000, 100 the default); v1 gets cpu.shares = weight × 1024 / 100. */
  readonly cpuWeight: number;
  /** A CPU quota in whole CPUs (the spec's `limits.cpus`): v2 cpu.max, v1 cpu.cfs_quota_us; null or absent: none. */
  readonly cpus?: number | null;
}

/** The CFS period a CPU quota is written against (the kernel's default, 100 ms). */
const CPU_PERIOD_US = 100_000;

/** What the kernel reads back for a task's cgroup (null: that file is missing or unreadable). */
export interface CgroupReadBack {
  readonly memoryBytes: number | null;
  readonly pids: number | null;
  readonly cpuWeight: number | null;
  /** The CPU quota in CPUs (quota / period), null where none is set or it cannot be read. */
  readonly cpus?: number | null;
}

/** One task's cgroup. */
export interface TaskCgroup {
  readonly version: 1 | 2;
  /** Its directories: one on v2, one per controller on v1. */
  readonly dirs: readonly string[];
  /** Moves `pid` in; what it forks from then on is born inside. */
  add(pid: number): Promise<void>;
  /** The limits as the kernel has them now. */
  readBack(): Promise<CgroupReadBack>;
  /** OOM kills in this cgroup since it was made (the kernel's `oom_kill` counter). */
  oomKills(): Promise<number>;
  /** Pids inside now. */
  procs(): Promise<number[]>;
  /** SIGKILLs everything inside until it is empty (a fork bomb may race: it retries); never throws. */
  killAll(): Promise<void>;
  /** Removes the cgroup (after killAll); false when the kernel refused (something is still inside). */
  remove(): Promise<boolean>;
}

/** A writable cgroup hierarchy this worker can put tasks in. */
export interface CgroupHierarchy {
  readonly version: 1 | 2;
  /** For the banner and the enforced-limits report: e.g. `cgroup v1 (memory, pids, cpu)`. */
  readonly describe: string;
  /** Makes the task's cgroup `name` with `limits`; throws when the kernel refuses. */
  create(name: string, limits: CgroupLimits): Promise<TaskCgroup>;
  /** The dirs the task cgroups are made in (`…/gpu-broker`): one on v2, one per controller on v1. */
  readonly bases: readonly string[];
  /** The task cgroup `name` as it is now (an earlier process's): to empty and remove it (sweep-stale.ts). */
  adopt(name: string): TaskCgroup;
}

/** Where each needed controller lives, as found in mountinfo and /proc/self/cgroup. */
export type CgroupLayout =
  | { readonly version: 2; readonly parent: string }
  | { readonly version: 1; readonly memory: string; readonly pids: string; readonly cpu: string };

/** The v1 controllers a task cgroup needs. */
const V1_CONTROLLERS = ['memory', 'pids', 'cpu'] as const;

/**
 * Where task cgroups go, from `/proc/self/mountinfo` and `/proc/self/cgroup` text; null when the host
 * offers no usable hierarchy (v2 is preferred when it is mounted and offers memory and pids). Pure.
 */
export function cgroupLayout(
  mountinfo: string,
  selfCgroup: string,
  v2Controllers: string | null,
): CgroupLayout | null {
  const mounts = parseMountinfo(mountinfo);
  const own = parseSelfCgroup(selfCgroup);
  const unified = mounts.find((m) => m.fstype === 'cgroup2');
  if (unified !== undefined && v2Controllers !== null) {
    const have = v2Controllers.trim().split(/\s+/);
    if (have.includes('memory') && have.includes('pids')) {
      return { version: 2, parent: below(unified, own.get('') ?? '/') };
    }
  }
  const v1: Partial<Record<(typeof V1_CONTROLLERS)[number], string>> = {};
  for (const c of V1_CONTROLLERS) {
    const m = mounts.find((x) => x.fstype === 'cgroup' && x.superOptions.split(',').includes(c));
    if (m === undefined) return null;
    const path = [...own.entries()].find(([k]) => k.split(',').includes(c))?.[1] ?? '/';
    v1[c] = below(m, path);
  }
  return { version: 1, memory: v1.memory!, pids: v1.pids!, cpu: v1.cpu! };
}

/** Probes made by this process (two workers in one process probe at once). */
let probes = 0;

/** Reads the host's cgroup setup; null when no writable hierarchy with memory and pids is there. */
export async function probeCgroups(opts: { root?: boolean } = {}): Promise<CgroupHierarchy | null> {
  if (!(opts.root ?? process.getuid?.() === 0)) return null;
  let layout: CgroupLayout | null;
  try {
    const [mountinfo, self] = await Promise.all([
      readFile('/proc/self/mountinfo', 'utf8'),
      readFile('/proc/self/cgroup', 'utf8'),
    ]);
    const v2 = mountinfoV2Point(mountinfo);
    const controllers =
      v2 === null ? null : await readFile(join(v2, 'cgroup.controllers'), 'utf8').catch(() => null);
    layout = cgroupLayout(mountinfo, self, controllers);
  } catch {
    return null;
  }
  if (layout === null) return null;
  const hierarchy = layout.version === 2 ? v2Hierarchy(layout.parent) : v1Hierarchy(layout);
  // Fail here, at start, rather than at each task's setup: make and remove a throwaway cgroup.
  try {
    const probe = await hierarchy.create(`probe-${process.pid}-${++probes}-${randomUUID().slice(0, 8)}`, {
      memoryBytes: 2 ** 30,
      pids: 64,
      cpuWeight: 100,
    });
    await probe.remove();
    return hierarchy;
  } catch {
    return null;
  }
}

function mountinfoV2Point(mountinfo: string): string | null {
  return parseMountinfo(mountinfo).find((m) => m.fstype === 'cgroup2')?.point ?? null;
}

/** v1: a directory per controller; `parents` are the worker's own cgroups. Exported for tests. */
export function v1Hierarchy(parents: { memory: string; pids: string; cpu: string }): CgroupHierarchy {
  const ensureBase = baseMaker();
  const bases = [...new Set([parents.memory, parents.pids, parents.cpu])].map((p) => join(p, 'gpu-broker'));
  return {
    version: 1,
    describe: 'cgroup v1 (memory, pids, cpu)',
    bases,
    adopt: (name) => {
      const dirs = {
        memory: join(parents.memory, 'gpu-broker', name),
        pids: join(parents.pids, 'gpu-broker', name),
        cpu: join(parents.cpu, 'gpu-broker', name),
      };
      return v1Cgroup(dirs, [...new Set([dirs.memory, dirs.pids, dirs.cpu])]);
    },
    create: async (name, limits) => {
      const dirs = {
        memory: join(parents.memory, 'gpu-broker', name),
        pids: join(parents.pids, 'gpu-broker', name),
        cpu: join(parents.cpu, 'gpu-broker', name),
      };
      const made: string[] = [];
      const cg = v1Cgroup(dirs, made);
      try {
        for (const dir of [dirs.memory, dirs.pids, dirs.cpu]) {
          if (made.includes(dir)) continue;
          await ensureBase(dirname(dir));
          // Not recursive: a cgroup of that name already there (another worker's) is never shared.
          await mkdir(dir);
          made.push(dir);
        }
        // A new, empty cgroup: its limits are set synchronously (kernel-files.ts).
        writeKernelFile(join(dirs.memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
        // No swap beyond the limit, where the kernel accounts swap (memsw must follow limit_in_bytes).
        writeKernelFileIfPresent(
          join(dirs.memory, 'memory.memsw.limit_in_bytes'),
          String(limits.memoryBytes),
        );
        writeKernelFile(join(dirs.pids, 'pids.max'), String(limits.pids));
        writeKernelFile(join(dirs.cpu, 'cpu.shares'), String(v1Shares(limits.cpuWeight)));
        if (limits.cpus != null) {
          writeKernelFile(join(dirs.cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
          writeKernelFile(join(dirs.cpu, 'cpu.cfs_quota_us'), String(limits.cpus * CPU_PERIOD_US));
        }
      } catch (err) {
        await cg.remove();
        throw err;
      }
      return cg;
    },
  };
}

/** cpu.weight (1–10000, default 100) as v1 cpu.shares (2–262144, default 1024). */
export function v1Shares(weight: number): number {
  return Math.max(2, Math.min(262144, Math.round((weight * 1024) / 100)));
}

function v1Cgroup(dirs: { memory: string; pids: string; cpu: string }, made: string[]): TaskCgroup {
  const all = () => [...new Set([dirs.memory, dirs.pids, dirs.cpu])];
  const procs = async () => {
    const seen = new Set<number>();
    for (const dir of made) for (const pid of await readPids(dir)) seen.add(pid);
    return [...seen].sort((a, b) => a - b);
  };
  return {
    version: 1,
    dirs: all(),
    add: async (pid) => {
      for (const dir of all()) await writeFile(join(dir, 'cgroup.procs'), String(pid));
    },
    readBack: async () => ({
      memoryBytes: await readNumber(join(dirs.memory, 'memory.limit_in_bytes')),
      pids: await readNumber(join(dirs.pids, 'pids.max')),
      cpuWeight: await readNumber(join(dirs.cpu, 'cpu.shares')).then((s) =>
        s === null ? null : Math.round((s * 100) / 1024),
      ),
      cpus: quotaCpus(
        await readNumber(join(dirs.cpu, 'cpu.cfs_quota_us')),
        await readNumber(join(dirs.cpu, 'cpu.cfs_period_us')),
      ),
    }),
    oomKills: () => oomKillCount(join(dirs.memory, 'memory.oom_control')),
    procs,
    killAll: () => killUntilEmpty(procs, null),
    remove: () => removeDirs(made),
  };
}

/** v2: one directory under `parent` with memory, pids and cpu enabled. Exported for tests. */
export function v2Hierarchy(parent: string): CgroupHierarchy {
  let prepared: Promise<void> | null = null;
  const base = join(parent, 'gpu-broker');
  return {
    version: 2,
    describe: 'cgroup v2 (memory, pids, cpu)',
    bases: [base],
    adopt: (name) => v2Cgroup(join(base, name), [join(base, name)]),
    create: async (name, limits) => {
      prepared ??= enableV2Controllers(parent, base);
      await prepared;
      const dir = join(base, name);
      await mkdir(dir);
      const made = [dir];
      const cg = v2Cgroup(dir, made);
      try {
        // A new, empty cgroup: its limits are set synchronously (kernel-files.ts).
        writeKernelFile(join(dir, 'memory.max'), String(limits.memoryBytes));
        writeKernelFileIfPresent(join(dir, 'memory.swap.max'), '0');
        // On OOM the whole task goes, not one process of it chosen by the kernel.
        writeKernelFileIfPresent(join(dir, 'memory.oom.group'), '1');
        writeKernelFile(join(dir, 'pids.max'), String(limits.pids));
        writeKernelFileIfPresent(join(dir, 'cpu.weight'), String(limits.cpuWeight));
        if (limits.cpus != null)
          writeKernelFile(join(dir, 'cpu.max'), `${limits.cpus * CPU_PERIOD_US} ${CPU_PERIOD_US}`);
      } catch (err) {
        await cg.remove();
        throw err;
      }
      return cg;
    },
  };
}

/**
 * Enables memory, pids and cpu for `base`'s children. A non-root cgroup with processes cannot give
 * controllers to children (EBUSY): the worker's own processes then move to a leaf beside `base` first.
 */
async function enableV2Controllers(parent: string, base: string): Promise<void> {
  const want = '+memory +pids +cpu';
  try {
    await writeFile(join(parent, 'cgroup.subtree_control'), want);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EBUSY') throw err;
    const leaf = join(parent, 'gpu-broker-worker');
    await mkdir(leaf, { recursive: true });
    for (const pid of await readPids(parent))
      await writeFile(join(leaf, 'cgroup.procs'), String(pid)).catch(() => undefined);
    await writeFile(join(parent, 'cgroup.subtree_control'), want);
  }
  await mkdir(base, { recursive: true });
  await writeFile(join(base, 'cgroup.subtree_control'), want);
}

function v2Cgroup(dir: string, made: string[]): TaskCgroup {
  const procs = () => readPids(dir);
  return {
    version: 2,
    dirs: [dir],
    add: (pid) => writeFile(join(dir, 'cgroup.procs'), String(pid)),
    readBack: async () => ({
      memoryBytes: await readNumber(join(dir, 'memory.max')),
      pids: await readNumber(join(dir, 'pids.max')),
      cpuWeight: await readNumber(join(dir, 'cpu.weight')),
      cpus: await readFile(join(dir, 'cpu.max'), 'utf8').then(
        (text) => {
          const [quota, period] = text.trim().split(/\s+/);
          return quota === 'max' ? null : quotaCpus(Number(quota), Number(period));
        },
        () => null,
      ),
    }),
    oomKills: () => oomKillCount(join(dir, 'memory.events')),
    procs,
    killAll: () => killUntilEmpty(procs, join(dir, 'cgroup.kill')),
    remove: () => removeDirs(made),
  };
}

/** Kills what is in the cgroup, looking again until it is empty (at most ~2 s). */
async function killUntilEmpty(procs: () => Promise<number[]>, killFile: string | null): Promise<void> {
  for (let round = 0; round < 100; round++) {
    const pids = await procs();
    if (pids.length === 0) return;
    if (killFile !== null && (await writeIfPresent(killFile, '1'))) {
      // cgroup.kill reaches every process, forks in flight included.
    } else {
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** `mkdir -p` of each task cgroup's parent (`…/gpu-broker`), once per hierarchy. */
function baseMaker(): (dir: string) => Promise<void> {
  const made = new Set<string>();
  return async (dir) => {
    if (made.has(dir)) return;
    await mkdir(dir, { recursive: true });
    made.add(dir);
  };
}

/** writeKernelFile where the kernel has the file (a controller's optional knob); false where it has not. */
function writeKernelFileIfPresent(file: string, value: string): boolean {
  // Looked for first: a write would make the file where it is not cgroupfs (a test's stand-in dir).
  if (!existsSync(file)) return false;
  writeKernelFile(file, value);
  return true;
}

async function removeDirs(dirs: string[]): Promise<boolean> {
  let ok = true;
  for (const dir of [...dirs].reverse()) {
    try {
      await rmdir(dir);
      dirs.splice(dirs.indexOf(dir), 1);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') ok = false;
    }
  }
  return ok;
}

async function readPids(dir: string): Promise<number[]> {
  try {
    const text = readKernelFile(join(dir, 'cgroup.procs'));
    return text
      .split('\n')
      .filter((l) => /^[0-9]+$/.test(l))
      .map(Number);
  } catch {
    return [];
  }
}

/** A number file (`max` reads as Infinity's stand-in: null). */
async function readNumber(file: string): Promise<number | null> {
  try {
    const n = Number(readKernelFile(file).trim());
    return Number.isFinite(n) ? n : null;
  } catch {
    return null;
  }
}

async function oomKillCount(file: string): Promise<number> {
  try {
    const m = readKernelFile(file).match(/^oom_kill ([0-9]+)$/m);
    return m?.[1] === undefined ? 0 : Number(m[1]);
  } catch {
    return 0;
  }
}

/** Writes `file` when it exists; true when written. */
async function writeIfPresent(file: string, value: string): Promise<boolean> {
  try {
    await stat(file);
  } catch {
    return false;
  }
  await writeFile(file, value);
  return true;
}

/**
 * Gives a v2 task cgroup's memory, pids and cpu to its children: a container engine makes the
 * container's own cgroup below it (`--cgroup-parent`, sandbox/container-cgroup.ts). The task cgroup then
 * holds no process itself (v2's "no internal processes"). No-op on v1.
 */
export async function delegateToChildren(cg: TaskCgroup): Promise<void> {
  const dir = cg.dirs[0];
  if (cg.version !== 2 || dir === undefined) return;
  await writeFile(join(dir, 'cgroup.subtree_control'), '+memory +pids +cpu');
}

/** Where the cgroup v2 hierarchy is mounted on this host (`/sys/fs/cgroup` usually); null when not. */
export async function v2MountPoint(): Promise<string | null> {
  return mountinfoV2Point(await readFile('/proc/self/mountinfo', 'utf8').catch(() => ''));
}

/** A CFS quota and period as whole CPUs; null for no quota (-1, "max") or a reading that is not one. */
function quotaCpus(quota: number | null, period: number | null): number | null {
  if (quota === null || period === null || !(quota > 0) || !(period > 0)) return null;
  return Math.round((quota / period) * 100) / 100;
}
