import { readdir, readFile, readlink } from 'node:fs/promises';
import { readKernelFile, readKernelLink } from '../sandbox/kernel-files.js';
import type { ProcessIdentity } from '../store/executions-repo.js';

/**
 * Process-group and cgroup probes for the executor (Linux). A task runs as the leader of its own process
 * group, so the group id is the task's pid and one signal reaches every process it forked that stayed in
 * the group.
 */

/** A process still alive in a task's group. */
export interface GroupMember {
  readonly pid: number;
  /**
   * The command name from /proc (at most 15 characters); `?` where it was not read (a cgroup's list of
   * pids, read on every poll, names nobody: {@link nameMembers} fills them in where they are reported)
   * or /proc cannot tell.
   */
  readonly name: string;
}

/**
 * `members` with each unread name (`?`) read from `/proc/PID/comm`; one that has exited meanwhile, or
 * whose entry cannot be read, keeps `?`. Only for what is reported (a cleanup that found leftovers):
 * the polls themselves stay one read of `cgroup.procs`.
 */
export async function nameMembers(members: readonly GroupMember[]): Promise<GroupMember[]> {
  return Promise.all(
    members.map(async (m) => {
      if (m.name !== '?') return m;
      try {
        const comm = (await readFile(`/proc/${m.pid}/comm`, 'utf8')).replace(/\n$/, '');
        return comm === '' ? m : { pid: m.pid, name: comm };
      } catch {
        return m;
      }
    }),
  );
}

/**
 * Sends `signal` to every process in group `pgid`. Returns false when the group no longer exists;
 * never throws, because the group may vanish at any moment.
 */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * The live (non-zombie) processes of group `pgid`; empty when the group is gone.
 *
 * `kill(-pgid, 0)` alone is not enough: an orphaned child becomes a zombie that only its new parent can
 * reap, and where PID 1 is not an init that reaps (many containers) zombies stay in the group for ever
 * although they hold no memory and no card. So a group that still answers signals is looked up in /proc
 * and counts as gone when all it has left are zombies.
 */
export async function liveGroupMembers(pgid: number): Promise<GroupMember[]> {
  try {
    process.kill(-pgid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return [];
    // EPERM: something in the group is not ours to signal; look it up like any other survivor.
  }
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    // Without /proc the signal probe is all there is: the group answered, so it is alive.
    return [{ pid: pgid, name: '?' }];
  }
  const members: GroupMember[] = [];
  await Promise.all(
    entries
      .filter((e) => /^[0-9]+$/.test(e))
      .map(async (e) => {
        let stat: string;
        try {
          stat = await readFile(`/proc/${e}/stat`, 'utf8');
        } catch {
          return; // exited while we looked
        }
        // The command name may contain spaces and parentheses; the fields after the last ')' do not.
        const close = stat.lastIndexOf(')');
        const fields = stat.slice(close + 2).split(' ');
        const state = fields[0];
        const pgrp = Number(fields[2]);
        if (pgrp === pgid && state !== 'Z' && state !== 'X') {
          members.push({ pid: Number(e), name: stat.slice(stat.indexOf('(') + 1, close) });
        }
      }),
  );
  return members.sort((a, b) => a.pid - b.pid);
}

/**
 * The kernel's start time of process `pid` (`/proc/PID/stat` field 22, clock ticks since boot), or null
 * when there is no such process. A pid with its start time names one process for the machine's uptime:
 * compared before a signal, it keeps a signal meant for a process that is gone from reaching another that
 * was given its pid since.
 */
export function processStartTime(pid: number): string | null {
  try {
    const stat = readKernelFile(`/proc/${pid}/stat`);
    // Fields after the command name (which may hold spaces and parentheses) start at field 3.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

/** This boot's id (`/proc/sys/kernel/random/boot_id`), read once; null where the kernel has none. */
export function bootId(): string | null {
  if (cachedBootId === undefined) {
    try {
      cachedBootId = readKernelFile('/proc/sys/kernel/random/boot_id').trim() || null;
    } catch {
      cachedBootId = null;
    }
  }
  return cachedBootId;
}
let cachedBootId: string | null | undefined;

/** Who process `pid` is for good (its start time and this boot), or null when it is gone or cannot tell. */
export function processIdentity(pid: number): ProcessIdentity | null {
  const start = processStartTime(pid);
  const boot = bootId();
  return start === null || boot === null ? null : { start, boot };
}

/** Sends `signal` to one process; false when it is gone. Never throws. */
export function signalPid(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * The live (non-zombie) processes whose PID namespace has inode `namespace` (as `/proc/PID/ns/pid` names
 * it: `pid:[inode]`), by host pid; empty once the namespace is gone. Used for sandboxes: a process that
 * calls setsid leaves its process group but never its namespace.
 */
export async function liveNamespaceMembers(namespace: number): Promise<GroupMember[]> {
  const want = `pid:[${namespace}]`;
  // Never the worker's own namespace (the whole host, or the container it runs in): a sandbox always has
  // one of its own, and every process listed here may be signalled.
  if (want === ownPidNamespace()) return [];
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return [];
  }
  const members: GroupMember[] = [];
  await Promise.all(
    entries
      .filter((e) => /^[0-9]+$/.test(e))
      .map(async (e) => {
        try {
          if ((await readlink(`/proc/${e}/ns/pid`)) !== want) return;
          const stat = await readFile(`/proc/${e}/stat`, 'utf8');
          const close = stat.lastIndexOf(')');
          const state = stat.slice(close + 2).split(' ')[0];
          if (state === 'Z' || state === 'X') return;
          members.push({ pid: Number(e), name: stat.slice(stat.indexOf('(') + 1, close) });
        } catch {
          // exited while we looked, or not ours to inspect
        }
      }),
  );
  return members.sort((a, b) => a.pid - b.pid);
}

/** The worker's own PID namespace as /proc names it (`pid:[inode]`), read once; null when unreadable. */
function ownPidNamespace(): string | null {
  if (cachedOwnNamespace === undefined) {
    try {
      cachedOwnNamespace = readKernelLink('/proc/self/ns/pid');
    } catch {
      cachedOwnNamespace = null;
    }
  }
  return cachedOwnNamespace;
}
let cachedOwnNamespace: string | null | undefined;

/**
 * Whether PID namespace `namespace` is certainly empty because its init, host pid `initPid`, has
 * finished exiting: the pid is gone, a zombie, or now names a process of another namespace (reused).
 * The kernel's dying init kills every other process of its namespace and waits until they are reaped
 * before it turns zombie (zap_pid_ns_processes), and nothing can enter a namespace whose init is gone,
 * so then no member can be alive. False (look with {@link liveNamespaceMembers}) whenever it cannot
 * tell, including while the init is alive or still waiting for the others.
 *
 * This spares the cleanup poll a readlink of every /proc entry per task (~4 ms a task on a
 * host with a few hundred processes).
 */
export async function namespaceInitGone(initPid: number, namespace: number): Promise<boolean> {
  let stat: string;
  try {
    stat = readKernelFile(`/proc/${initPid}/stat`);
  } catch (err) {
    return (
      (err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ESRCH'
    );
  }
  const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  if (state === 'Z' || state === 'X') return true;
  try {
    return readKernelLink(`/proc/${initPid}/ns/pid`) !== `pid:[${namespace}]`;
  } catch (err) {
    return (
      (err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ESRCH'
    );
  }
}

/** Where the kernel counts OOM kills for a cgroup, and the count when the probe was made. */
export interface OomProbe {
  readonly file: string;
  readonly baseline: number;
}

/**
 * Finds the OOM-kill counter of the cgroup `pid` belongs to (cgroup v2 `memory.events`, else v1
 * `memory.oom_control`; both have an `oom_kill N` line) and reads it. Null where there is none
 * (not Linux, no memory controller, kernel too old); OOM is then reported as a plain SIGKILL.
 */
export async function probeOomKills(pid: number | 'self'): Promise<OomProbe | null> {
  let cgroups: string;
  try {
    cgroups = readKernelFile(`/proc/${pid}/cgroup`);
  } catch {
    return null;
  }
  const candidates: string[] = [];
  for (const line of cgroups.split('\n')) {
    const [, controllers, path] = line.match(/^[0-9]+:([^:]*):(.*)$/) ?? [];
    if (path === undefined) continue;
    const rel = path === '/' ? '' : path;
    if (controllers === '') candidates.push(`/sys/fs/cgroup${rel}/memory.events`);
    if (controllers?.split(',').includes('memory')) {
      // Without a cgroup namespace a container sees its host path here but has its own cgroup mounted
      // at the root, so try both.
      candidates.push(
        `/sys/fs/cgroup/memory${rel}/memory.oom_control`,
        '/sys/fs/cgroup/memory/memory.oom_control',
      );
    }
  }
  for (const file of candidates) {
    const count = await readOomKillCount(file);
    if (count !== null) return { file, baseline: count };
  }
  return null;
}

/** The `oom_kill` counter in `file`, or null when it cannot be read. */
export async function readOomKillCount(file: string): Promise<number | null> {
  try {
    const text = readKernelFile(file);
    const m = text.match(/^oom_kill ([0-9]+)$/m);
    return m?.[1] === undefined ? null : Number(m[1]);
  } catch {
    return null;
  }
}
