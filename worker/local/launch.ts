import type { ChildProcess, StdioOptions } from 'node:child_process';
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { errorMessage } from '../../src/platform/error-message.js';

/**
 * How a task box's process is started (step 2 of executor.ts), behind one small interface with two
 * bindings:
 *
 *   inline   `child_process.spawn` in the worker itself. libuv forks the worker and waits for the exec,
 *            synchronously: the event loop stops for the fork of the whole worker (5–12 ms at ~100 MiB,
 *            more under load).
 *   spawner  a small long-lived Node process (spawner.ts, ADR 0032) forks instead, off the worker's
 *            event loop, and hands the pipes back over its IPC channel.
 *
 * Either way the process is the leader of a new process group (the box signals it by pid), stdout and
 * stderr (and bwrap's status on fd 3) arrive as readable streams, and fd 4 is written once, when the
 * caller says so (bwrap's `--args 4`: after the executor has moved the process into its cgroup).
 */

/** What to start. */
export interface LaunchRequest {
  readonly command: string;
  /** argv[0] when it is not `command` (the native sandbox's bare name, so no install path shows in the task's /proc/1/cmdline). */
  readonly argv0?: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string;
  /** Switch to this uid/gid before exec (the `none` kind under `--run-as`). */
  readonly uid?: number;
  readonly gid?: number;
  /** fd 3: a pipe to read (bwrap's JSON status), or nothing. */
  readonly statusPipe: boolean;
  /** fd 4: a pipe written once by `writeInput` (bwrap's options), or nothing. */
  readonly inputPipe: boolean;
  /** A file the launcher opens read-only at this descriptor (5 or more) of the process, or nothing. */
  readonly fileAt?: FileAt;
}

/** A file opened for a process at one of its descriptors (bwrap's `--seccomp 5` reads the filter there). */
export interface FileAt {
  readonly fd: number;
  readonly path: string;
}

/** The lowest descriptor a FileAt may take (0-4 are stdio, the status pipe and the options pipe). */
export const FIRST_FILE_FD = 5;

/** `stdio` with `fileAt`'s descriptor at its place (gaps 'ignore'), for child_process.spawn. */
export function withFileAt(
  stdio: ReadonlyArray<'ignore' | 'pipe'>,
  fileAt: FileAt | undefined,
  opened: number,
): Array<'ignore' | 'pipe' | number> {
  const out: Array<'ignore' | 'pipe' | number> = [...stdio];
  if (fileAt === undefined) return out;
  while (out.length < fileAt.fd) out.push('ignore');
  out[fileAt.fd] = opened;
  return out;
}

/** How the started process ended; `lost`: nobody can tell any more (the spawner died), it was killed. */
export interface LaunchExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly lost?: string;
}

/** A started process as the executor and its box see it. */
export interface Launched {
  /** Its pid, which is also its process group id. */
  readonly pid: number;
  /** Indexed by fd: 1 stdout, 2 stderr, 3 the status pipe when asked for; null where there is none. */
  readonly stdio: ReadonlyArray<Readable | null>;
  /** Resolves once it has exited and been reaped; never rejects. */
  readonly exit: Promise<LaunchExit>;
  /** Writes `data` into fd 4 and closes it (once); a process already gone is no error. */
  writeInput(data: Buffer): void;
}

/** Starts processes; `launch` never throws: it resolves the started process, or why it did not start. */
export interface Launcher {
  launch(req: LaunchRequest): Promise<Launched | string>;
}

/** The stdio layout of a request: stdin ignored, stdout and stderr piped, then fd 3 and 4 as asked. */
export function stdioOf(req: Pick<LaunchRequest, 'statusPipe' | 'inputPipe'>): Array<'ignore' | 'pipe'> {
  const stdio: Array<'ignore' | 'pipe'> = ['ignore', 'pipe', 'pipe'];
  if (req.statusPipe || req.inputPipe) stdio.push(req.statusPipe ? 'pipe' : 'ignore');
  if (req.inputPipe) stdio.push('pipe');
  return stdio;
}

/** The inline binding: `child_process.spawn` in this process (see the module comment). */
export const inlineLauncher: Launcher = {
  launch: async (req) => {
    let child: ChildProcess;
    let opened: number | undefined;
    try {
      if (req.fileAt !== undefined) opened = openSync(req.fileAt.path, 'r');
      child = spawn(req.command, req.args, {
        cwd: req.cwd,
        env: req.env,
        detached: true,
        stdio: withFileAt(stdioOf(req), req.fileAt, opened ?? -1) as StdioOptions,
        ...(req.argv0 === undefined ? {} : { argv0: req.argv0 }),
        ...(req.uid === undefined || req.gid === undefined ? {} : { uid: req.uid, gid: req.gid }),
      });
    } catch (err) {
      return errorMessage(err);
    } finally {
      // The child holds its own copy once spawned (or nobody does).
      if (opened !== undefined) closeSync(opened);
    }
    const exit = new Promise<LaunchExit>((r) => {
      child.once('exit', (code, signal) => r({ code, signal }));
    });
    const spawnError = await new Promise<Error | null>((r) => {
      child.once('spawn', () => r(null));
      child.once('error', (err) => r(err));
    });
    if (spawnError !== null || child.pid === undefined) {
      child.stdout?.destroy();
      child.stderr?.destroy();
      return spawnError === null ? 'no pid' : errorMessage(spawnError);
    }
    // Later 'error' events (e.g. a failed kill) must not become uncaught exceptions.
    child.on('error', () => undefined);
    const stdio = [null, child.stdout, child.stderr, (child.stdio[3] as Readable | null | undefined) ?? null];
    return {
      pid: child.pid,
      stdio,
      exit,
      writeInput: (data) => {
        const input = child.stdio[4] as Writable | null | undefined;
        input?.on('error', () => undefined);
        input?.end(data);
      },
    };
  },
};
