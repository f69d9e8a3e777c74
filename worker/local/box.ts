import { constants } from 'node:os';
import type { TaskLimits } from '../sandbox/limits.js';
import type { FileAt, Launched } from './launch.js';
import type { GroupMember } from './process-group.js';
import {
  liveGroupMembers,
  liveNamespaceMembers,
  namespaceInitGone,
  processStartTime,
  signalGroup,
  signalPid,
} from './process-group.js';

/**
 * A task box: how one execution's processes are spawned, signalled, watched and torn down. The executor
 * runs the same steps for every kind (executor.ts); only these few operations differ.
 *
 *   none   the task's argv as the leader of a new process group (optionally as the `--run-as` user);
 *          what it forks stays in the group unless it calls setsid, so this is not isolation.
 *   bwrap  bubblewrap (sandbox/bwrap.ts) as the group leader; the task runs in its own PID namespace,
 *          which the kernel empties when the namespace's init exits.
 *   container  the engine's `run` client as the group leader; the container itself is the engine's
 *          (container-box.ts).
 */

/** What to spawn. */
export interface BoxSpawn {
  readonly command: string;
  /** argv[0] when it is not `command` (launch.ts LaunchRequest). */
  readonly argv0?: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  /** Switch to this uid/gid before exec (the `none` kind under `--run-as`). */
  readonly uid?: number;
  readonly gid?: number;
  /** Give the process a pipe on fd 3 (bwrap's JSON status). */
  readonly statusPipe?: boolean;
  /**
   * Written into a pipe on fd 4 and closed (bwrap's `--args 4`): the sandbox's options, kept off its
   * command line (sandbox/bwrap.ts bwrapCommandLine).
   */
  readonly argsData?: Buffer;
  /** A file opened read-only at this descriptor of the process (bwrap's `--seccomp 5`: the filter). */
  readonly fileAt?: FileAt;
  /**
   * The process moves itself into the task's cgroups before it runs anything else (the native sandbox's
   * `--cgroup-procs`): the executor skips `limits.confine`.
   */
  readonly selfConfined?: boolean;
}

/** A task's exit as the box reports it. */
export interface BoxExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** One execution's box; see the module comment. */
export interface TaskBox {
  readonly kind: 'none' | 'bwrap' | 'container';
  readonly spawn: BoxSpawn;
  /** Called once the spawned process runs. */
  attach(child: Pick<Launched, 'pid' | 'stdio'>): void;
  /**
   * Asks the task's processes to stop (SIGTERM); the grace period starts. `graceSeconds` (a preemption's
   * grace) replaces the plan's kill grace where the box itself enforces one (a container engine's stop).
   */
  terminate(graceSeconds?: number): void;
  /** Kills every process of the box (SIGKILL); idempotent. */
  kill(): void;
  /** Processes of the box still alive; empty once it is gone. */
  live(): Promise<GroupMember[]>;
  /** Maps the spawned process's exit to the task's. */
  exitOf(code: number | null, signal: NodeJS.Signals | null): BoxExit;
  /** Releases what the box holds outside its processes (a container record); never throws. */
  dispose(): Promise<void>;
  /**
   * The task's resource limits where this box enforces them (a bwrap box; sandbox/limits.ts): the
   * executor moves the spawned process into the task's cgroup before releasing it (`confine`), starts
   * the disk watch, and asks after the exit which limit, if any, ended the task.
   */
  readonly limits?: TaskLimits;
}

/** The `none` box: the task's own argv in a new process group. */
export function plainBox(spawn: BoxSpawn): TaskBox {
  let pgid: number | undefined;
  return {
    kind: 'none',
    spawn,
    attach: (child) => {
      pgid = child.pid;
    },
    terminate: () => {
      if (pgid !== undefined) signalGroup(pgid, 'SIGTERM');
    },
    kill: () => {
      if (pgid !== undefined) signalGroup(pgid, 'SIGKILL');
    },
    live: async () => (pgid === undefined ? [] : liveGroupMembers(pgid)),
    exitOf: (code, signal) => ({ code, signal }),
    dispose: async () => undefined,
  };
}

/**
 * The `bwrap` box. bwrap reports on fd 3 (`--json-status-fd`) the host pid of the sandbox's init and
 * the inode of its PID namespace; SIGTERM goes to every process of that namespace but the init, SIGKILL
 * to the init (the kernel then kills the rest) and to bwrap's own group. bwrap exits with the task's
 * status, a signal death as 128 + the signal number, which is mapped back (so a task that calls
 * `exit(137)` reads as SIGKILL: bwrap gives no way to tell them apart).
 */
export function bwrapBox(spawn: BoxSpawn, limits: TaskLimits | null = null): TaskBox {
  let pgid: number | undefined;
  let initPid: number | undefined;
  let pidNamespace: number | undefined;
  // Their start times, read when each pid was learned: a SIGKILL by pid goes only to the same process
  // (a late kill, after the task ended and its pids were reaped, must not reach a process given one since).
  let leaderStart: string | null = null;
  let initStart: string | null = null;
  const still = (pid: number | undefined, start: string | null): pid is number =>
    pid !== undefined && start !== null && processStartTime(pid) === start;
  /** The namespace's processes; no /proc walk once its init is known to be gone (process-group.ts). */
  const namespaceMembers = async (ns: number): Promise<GroupMember[]> =>
    initPid !== undefined && (await namespaceInitGone(initPid, ns)) ? [] : liveNamespaceMembers(ns);
  const members = async (): Promise<GroupMember[]> => {
    // A task held in its own cgroup is all there (its procs); the namespace walk reads every /proc entry.
    const inNamespace =
      pidNamespace === undefined || limits?.contained === true ? [] : await namespaceMembers(pidNamespace);
    const group = pgid === undefined ? [] : await liveGroupMembers(pgid);
    // The cgroup holds whatever the task started, wherever it went (a process can leave its group and,
    // through a setuid helper, even its namespace; never its cgroup).
    const inCgroup = limits === null ? [] : (await limits.procs()).map((pid) => ({ pid, name: '?' }));
    const byPid = new Map<number, GroupMember>();
    for (const m of [...inCgroup, ...inNamespace, ...group]) byPid.set(m.pid, m);
    return [...byPid.values()].sort((a, b) => a.pid - b.pid);
  };
  return {
    kind: 'bwrap',
    spawn: { ...spawn, statusPipe: true },
    attach: (child) => {
      pgid = child.pid;
      leaderStart = processStartTime(child.pid);
      const status = child.stdio[3];
      if (status === null || status === undefined || !('on' in status)) return;
      let text = '';
      status.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8');
        // bwrap writes one JSON document per event; the first names the init and the namespaces.
        for (const m of text.matchAll(/"child-pid":\s*(\d+)/g)) {
          if (initPid === Number(m[1])) continue;
          initPid = Number(m[1]);
          initStart = processStartTime(initPid);
        }
        for (const m of text.matchAll(/"pid-namespace":\s*(\d+)/g)) pidNamespace = Number(m[1]);
        if (text.length > 65536) text = text.slice(-4096);
      });
      status.on('error', () => undefined);
    },
    terminate: () => {
      if (pidNamespace === undefined || initPid === undefined) {
        // Not yet known: the sandbox is still being set up and nothing of the task can be asked to stop.
        if (still(pgid, leaderStart)) signalGroup(pgid, 'SIGKILL');
        return;
      }
      const init = initPid;
      // The namespace's processes: in a contained task, its cgroup's but bwrap's own (outside the namespace).
      const inNamespace =
        limits?.contained === true
          ? limits.procs().then((pids) => pids.filter((pid) => pid !== pgid))
          : liveNamespaceMembers(pidNamespace).then((list) => list.map((m) => m.pid));
      void inNamespace.then((pids) => {
        for (const pid of pids) if (pid !== init) signalPid(pid, 'SIGTERM');
      });
    },
    kill: () => {
      // Everything of a sandbox is in its PID namespace (gone with its init) and, contained, in its
      // cgroup: bwrap's own group needs a signal only while bwrap itself is there.
      if (still(initPid, initStart)) signalPid(initPid, 'SIGKILL');
      if (still(pgid, leaderStart)) signalGroup(pgid, 'SIGKILL');
      void limits?.killAll();
    },
    live: members,
    exitOf: (code, signal) => {
      if (signal !== null || code === null || code <= 128) return { code, signal };
      const name = signalName(code - 128);
      return name === null ? { code, signal } : { code: null, signal: name };
    },
    dispose: async () => limits?.release(),
    ...(limits === null ? {} : { limits }),
  };
}

/** The name of signal number `n` (9 → SIGKILL); null for a number that names none. */
export function signalName(n: number): NodeJS.Signals | null {
  for (const [name, num] of Object.entries(constants.signals)) {
    if (num === n) return name as NodeJS.Signals;
  }
  return null;
}
