import { execFile } from 'node:child_process';
import type { ContainerSetup } from '../sandbox/container.js';
import { labelledContainers } from '../sandbox/container.js';
import type { TaskLimits } from '../sandbox/limits.js';
import type { BoxSpawn, TaskBox } from './box.js';
import { signalName } from './box.js';
import type { GroupMember } from './process-group.js';
import { liveGroupMembers, signalGroup } from './process-group.js';

/**
 * The `container` box (box.ts): the engine's `run --rm` client is the group leader, and the
 * container itself belongs to the engine (conmon or dockerd), not to that group. So:
 *
 *   logs       the client's stdout/stderr pipes (the engine attaches them to the container's), written
 *              by the worker like any task's; nothing is read from a file the task could write;
 *   terminate  `stop -t <grace>`: SIGTERM to the container's init (with `--init`, forwarded to the task),
 *              SIGKILL from the engine after the grace;
 *   kill       `kill`, then `rm -f` the container, and SIGKILL to the client's group;
 *   live       the client's group plus every container carrying the execution's label (`ps --all`, so
 *              an exited but not yet removed one counts); an engine that does not answer counts as a
 *              container still there, so a cleanup receipt is never given on a guess; after a kill,
 *              each container still listed is removed again;
 *   limits     the engine's flags hold memory, pids and cpu; the worker watches the task dir and the
 *              container's memory state as for a sandboxed task, and removes the task dir at dispose;
 *   exit       the client exits with the task's status, a signal death as 128 + the signal number, which
 *              is mapped back as for bwrap (125-127 are the engine's own errors and stay exit codes).
 */

/** What the container box needs besides the spawn. */
export interface ContainerBoxOptions {
  readonly setup: ContainerSetup;
  /** The container's name (containerName()). */
  readonly name: string;
  readonly executionId: string;
  /** Seconds `stop` waits before the engine kills the container. */
  readonly graceSeconds: number;
  /**
   * The task's limits as the worker watches them (sandbox/limits.ts containerTaskLimits): the task dir's
   * disk use and the container's memory state, then the task dir removed at dispose; null: none.
   */
  readonly limits?: TaskLimits | null;
}

/** The `container` box; see the module comment. */
export function containerBox(spawn: BoxSpawn, opts: ContainerBoxOptions): TaskBox {
  let pgid: number | undefined;
  let killed = false;
  const engine = (args: string[]) => runEngine(opts.setup, args);
  const members = async (): Promise<GroupMember[]> => {
    const group = pgid === undefined ? [] : await liveGroupMembers(pgid);
    const containers = await labelledContainers(opts.setup, opts.executionId);
    // A client killed while the engine was still creating the container can leave one that appears
    // after the kill's `rm -f`: once killed, whatever is still listed is removed again.
    if (killed) for (const name of containers ?? []) void engine(['rm', '--force', name]);
    const inEngine: GroupMember[] =
      containers === null
        ? [{ pid: 0, name: `${opts.setup.engine} ps did not answer` }]
        : containers.map((name) => ({ pid: 0, name: `container ${name}` }));
    return [...group, ...inEngine];
  };
  return {
    kind: 'container',
    spawn,
    attach: (child) => {
      pgid = child.pid;
    },
    terminate: (graceSeconds) => {
      const grace = graceSeconds ?? opts.graceSeconds;
      void engine(['stop', '--time', String(Math.max(0, Math.ceil(grace))), opts.name]);
    },
    kill: () => {
      killed = true;
      void engine(['kill', opts.name]).then(() => engine(['rm', '--force', opts.name]));
      if (pgid !== undefined) signalGroup(pgid, 'SIGKILL');
    },
    live: members,
    exitOf: (code, signal) => {
      if (signal !== null || code === null || code <= 128) return { code, signal };
      const name = signalName(code - 128);
      return name === null ? { code, signal } : { code: null, signal: name };
    },
    dispose: async () => {
      await engine(['rm', '--force', opts.name]);
      await opts.limits?.release();
    },
    ...(opts.limits === undefined || opts.limits === null ? {} : { limits: opts.limits }),
  };
}

/** Runs an engine command for its effect; never rejects (the container may be gone already). */
function runEngine(setup: ContainerSetup, args: string[]): Promise<void> {
  return new Promise((resolve) => {
    execFile(setup.command, args, { env: { ...setup.env }, timeout: 60_000 }, () => resolve());
  });
}
