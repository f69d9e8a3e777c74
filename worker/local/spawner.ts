import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { errorMessage } from '../../src/platform/error-message.js';
import { packageRoot } from '../../src/platform/package-root.js';
import { unsafeToRunAsRoot } from '../sandbox/native.js';
import type { LaunchExit, Launched, Launcher, LaunchRequest } from './launch.js';
import { FIRST_FILE_FD, stdioOf } from './launch.js';
import type { FromSpawner, ToSpawner } from './spawner-messages.js';

/**
 * The spawner (ADR 0032): a small long-lived Node process, this worker's child, that forks the task
 * boxes so that the worker's event loop never blocks in a fork of the whole worker (~7.5 ms of
 * every task's worker time went to `child_process.spawn`, which forks the ~100 MiB worker and waits for
 * the exec; forking the ~40 MiB spawner is cheaper, and it happens on another process's thread).
 *
 * Over its IPC channel (JSON, one message per event):
 *   worker → spawner  {t: spawn, id, command, argv0?, args, env, cwd, uid?, gid?, stdio, fileAt?}
 *                     {t: input, id, data}  fd 4's bytes (base64), written and closed
 *   spawner → worker  {t: spawned, id, pid}, then {t: fd, id, fd} with the pipe's handle (SCM_RIGHTS)
 *                     for each readable pipe (stdout, stderr, the status pipe), or {t: error, id, message}
 *                     {t: exit, id, code, signal}  once reaped
 *
 * The pipes change hands: the spawner stops reading them before it sends them and marks them not
 * readable (libuv starts reading a child's pipe at once, and Node resumes a child's pipes when it exits:
 * what it read there would never reach the worker); Node closes the spawner's copy of each once the
 * worker has acknowledged it. The worker reads them as if it had spawned the task itself (log caps and
 * backpressure unchanged, task-io/logs.ts). The process is the spawner's child, so the spawner reaps it;
 * the worker signals it by pid and group as before.
 *
 * Two programs speak this protocol (ADR 0040): the native spawner (`gpu-broker-spawner`, built from
 * native/gpu-broker-spawner.c by `npm run build`), which starts each box with vfork + exec and takes the
 * worker's requests as binary frames on its stdin (`spawnFrame`, `inputFrame`), and the Node program
 * below (requests as IPC messages), used where the native one is not built or not safe to run as root.
 * Both answer on the IPC channel in the same JSON messages, pipes as Node's own handle messages.
 *
 * When the spawner dies (or says nothing for SPAWN_TIMEOUT_MS while a start waits, when it is killed): every
 * task it started is killed — bwrap's `--die-with-parent` already did for a sandbox; the worker kills
 * each box too — and ends WORKER_LOST (its exit status is lost with its parent); a start in flight fails
 * SETUP_FAILED; the next start forks a fresh spawner. When the worker dies, the spawner sees its channel
 * close and exits (and with it every sandbox, as before).
 */

/** A start the spawner has not answered in this long means it is stuck: it is killed and restarted. */
export const SPAWN_TIMEOUT_MS = 10_000;

/**
 * The Node spawner's program (spawner-program.ts, compiled by `npm run build`): run as a file of its own,
 * typed and linted like the rest, not a program in a string.
 */
export function nodeSpawnerPath(): string {
  return join(packageRoot(), 'dist', 'worker', 'local', 'spawner-program.js');
}

/** Which spawner program: `auto` takes the native one when it is built (and safe to run as root). */
export type SpawnerProgram = 'auto' | 'node' | 'native';

/** Where `npm run build` puts the native spawner (scripts/build-native.sh). */
export function nativeSpawnerPath(): string {
  return join(packageRoot(), 'dist', 'native', 'gpu-broker-spawner');
}

/** The program a spawner runs: the native one's path, or null for the Node one; why not when it cannot. */
export function chooseSpawnerProgram(
  choice: SpawnerProgram,
  path = nativeSpawnerPath(),
): string | null | Error {
  if (choice === 'node') return null;
  const problem = !existsSync(path)
    ? `${path} is not built (npm run build builds it where a C compiler is installed)`
    : process.getuid?.() === 0
      ? unsafeToRunAsRoot(path)
      : null;
  if (problem === null) return path;
  return choice === 'native' ? new Error(`the native spawner cannot be used: ${problem}`) : null;
}

/** A frame for the native spawner: u32 length (LE) of what follows, then its kind and body. */
function frame(kind: 'S' | 'I', parts: readonly Buffer[]): Buffer {
  const body = Buffer.concat([Buffer.from(kind, 'latin1'), ...parts]);
  const head = Buffer.alloc(4);
  head.writeUInt32LE(body.length);
  return Buffer.concat([head, body]);
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

function str(s: string): Buffer {
  const bytes = Buffer.from(s, 'utf8');
  return Buffer.concat([u32(bytes.length), bytes]);
}

/**
 * The native spawner's `spawn` frame (see native/gpu-broker-spawner.c); throws for a string holding a NUL,
 * which no exec could take (Node's spawn refuses it the same way).
 */
export function spawnFrame(id: number, req: LaunchRequest): Buffer {
  const strings = [req.command, req.argv0 ?? '', req.cwd, ...req.args, ...Object.entries(req.env).flat()];
  if (strings.some((x) => x.includes('\0')))
    throw new Error('an argument or the environment holds a NUL byte');
  const ids = req.uid !== undefined && req.gid !== undefined;
  const stdio = stdioOf(req);
  const file = req.fileAt;
  if (file !== undefined && (file.fd < FIRST_FILE_FD || file.fd > 7 || file.path.includes('\0')))
    throw new Error(`a file at descriptor ${file.fd} cannot be given`);
  return frame('S', [
    u32(id),
    Buffer.from([(ids ? 1 : 0) | (req.argv0 !== undefined ? 2 : 0) | (file !== undefined ? 4 : 0)]),
    ...(ids ? [u32(req.uid!), u32(req.gid!)] : []),
    Buffer.from([stdio.length, ...stdio.map((s) => (s === 'pipe' ? 1 : 0))]),
    str(req.command),
    ...(req.argv0 !== undefined ? [str(req.argv0)] : []),
    ...(file !== undefined ? [Buffer.from([file.fd]), str(file.path)] : []),
    str(req.cwd),
    u32(req.args.length),
    ...req.args.map(str),
    u32(Object.keys(req.env).length),
    ...Object.entries(req.env).map(([k, v]) => str(`${k}=${v}`)),
  ]);
}

/** The native spawner's `input` frame: fd 4's bytes. */
export function inputFrame(id: number, data: Buffer): Buffer {
  return frame('I', [u32(id), data]);
}

/** One start in flight or one started process, by id. */
interface Pending {
  readonly want: readonly number[];
  readonly fds: Map<number, Readable>;
  pid?: number;
  started: boolean;
  readonly exit: Promise<LaunchExit>;
  timer?: NodeJS.Timeout;
  resolveStart(r: Launched | string): void;
  resolveExit(e: LaunchExit): void;
}

/** The worker's side of the spawner; see the module comment. */
export class Spawner implements Launcher {
  private proc: ChildProcess | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private readonly startTimeoutMs: number;
  /** How many messages the spawner has sent: a start's timer asks whether it said anything since. */
  private heard = 0;
  /** The native spawner's path, null for the Node program, or why the asked one cannot run. */
  private readonly program: string | null | Error;

  constructor(opts: { readonly startTimeoutMs?: number; readonly program?: SpawnerProgram } = {}) {
    this.startTimeoutMs = opts.startTimeoutMs ?? SPAWN_TIMEOUT_MS;
    this.program = chooseSpawnerProgram(opts.program ?? 'auto');
  }

  /** Which program starts the tasks (the banner's `started by:`), or why the asked one cannot run. */
  describe(): string {
    if (this.program instanceof Error) return this.program.message;
    if (this.program === null && !existsSync(nodeSpawnerPath()))
      return `the Node spawner ${nodeSpawnerPath()} is not built: run npm run build`;
    return this.program === null ? 'the Node spawner' : `the native spawner ${this.program}`;
  }

  /** The spawner's pid while it runs (tests kill it to prove the worker copes). */
  get pid(): number | undefined {
    return this.proc?.pid;
  }

  launch(req: LaunchRequest): Promise<Launched | string> {
    const proc = this.current();
    if (typeof proc === 'string') return Promise.resolve(proc);
    const id = this.nextId++;
    const stdio = stdioOf(req);
    const want = stdio.flatMap((s, fd) => (s === 'pipe' && fd !== 4 ? [fd] : []));
    return new Promise<Launched | string>((resolveStart) => {
      let resolveExit!: (e: LaunchExit) => void;
      const exit = new Promise<LaunchExit>((r) => {
        resolveExit = r;
      });
      const p: Pending = {
        want,
        fds: new Map(),
        started: false,
        exit,
        resolveStart: (r) => {
          clearTimeout(p.timer);
          if (typeof r === 'string') {
            // Pipes already handed over for a start that failed: nobody will read them (a paused one
            // would never see its end, and its descriptor would stay open).
            for (const pipe of p.fds.values()) pipe.destroy();
            this.forget(id);
          }
          resolveStart(r);
        },
        resolveExit: (e) => {
          this.forget(id);
          resolveExit(e);
        },
      };
      this.pending.set(id, p);
      this.refWhileBusy();
      this.armStartTimer(id, p);
      let sent: boolean;
      if (this.program === null)
        sent = this.send(proc, {
          t: 'spawn',
          id,
          command: req.command,
          ...(req.argv0 === undefined ? {} : { argv0: req.argv0 }),
          args: req.args,
          env: req.env,
          cwd: req.cwd,
          stdio,
          ...(req.fileAt === undefined ? {} : { fileAt: req.fileAt }),
          ...(req.uid === undefined || req.gid === undefined ? {} : { uid: req.uid, gid: req.gid }),
        });
      else {
        let bytes: Buffer;
        try {
          bytes = spawnFrame(id, req);
        } catch (err) {
          p.resolveStart(errorMessage(err));
          return;
        }
        sent = this.write(proc, bytes);
      }
      if (!sent) p.resolveStart('the spawner is gone');
    });
  }

  /**
   * Kills a spawner that has said nothing for `startTimeoutMs` while this start waits. Silence, not time
   * since the request: after the worker's own event loop stalled past the timeout, the spawner's answers
   * are waiting unread (timers run before pending I/O, and each handed-over pipe takes a round trip), so
   * the check runs after a poll phase (setImmediate) and waits again while the spawner is still talking.
   */
  private armStartTimer(id: number, p: Pending): void {
    const heardBefore = this.heard;
    p.timer = setTimeout(() => {
      setImmediate(() => {
        if (p.started || this.pending.get(id) !== p) return;
        if (this.heard > heardBefore) this.armStartTimer(id, p);
        else this.proc?.kill('SIGKILL');
      });
    }, this.startTimeoutMs);
    p.timer.unref();
  }

  /** The running spawner, forked on first use and after a death; why not when it cannot start. */
  private current(): ChildProcess | string {
    if (this.proc !== null) return this.proc;
    if (this.program instanceof Error) return this.program.message;
    let proc: ChildProcess;
    try {
      proc =
        this.program === null
          ? // No inherited node options (a profiler flag, NODE_OPTIONS): it is a plain, small process.
            spawn(process.execPath, ['--max-old-space-size=64', nodeSpawnerPath()], {
              stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
              env: {},
              serialization: 'json',
            })
          : // Its requests come on stdin; its answers go on the IPC channel (fd 3).
            spawn(this.program, [], {
              stdio: ['pipe', 'ignore', 'inherit', 'ipc'],
              env: {},
              serialization: 'json',
            });
    } catch (err) {
      return `cannot start the spawner: ${errorMessage(err)}`;
    }
    this.proc = proc;
    proc.on('message', (m: FromSpawner, handle: unknown) => this.onMessage(m, handle));
    const died = (why: string) => this.died(proc, why);
    proc.once('error', (err) => died(`spawner error: ${err.message}`));
    proc.once('exit', (code, signal) => died(`the spawner exited (${signal ?? `code ${code}`})`));
    proc.once('disconnect', () => died('the spawner closed its channel'));
    proc.stdin?.on('error', (err) => died(`cannot reach the spawner: ${err.message}`));
    this.refWhileBusy();
    return proc;
  }

  private onMessage(m: FromSpawner, handle: unknown): void {
    this.heard++;
    const p = this.pending.get(m.id);
    if (p === undefined) {
      // A pipe of a start already given up on: nobody will read it.
      (handle as Readable | undefined)?.destroy?.();
      return;
    }
    if (m.t === 'error') p.resolveStart(m.message);
    else if (m.t === 'spawned') p.pid = m.pid;
    else if (m.t === 'fd') p.fds.set(m.fd, held(handle as Socket));
    else if (m.t === 'exit') {
      if (p.started) p.resolveExit({ code: m.code, signal: m.signal });
      else p.resolveStart(`the process exited before its pipes arrived (${m.signal ?? `code ${m.code}`})`);
      return;
    }
    if (!p.started && p.pid !== undefined && p.want.every((fd) => p.fds.has(fd))) this.complete(m.id, p);
  }

  private complete(id: number, p: Pending): void {
    p.started = true;
    const stdio: Array<Readable | null> = [null, null, null, null];
    for (const [fd, s] of p.fds) stdio[fd] = s;
    const proc = this.proc;
    p.resolveStart({
      pid: p.pid!,
      stdio,
      exit: p.exit,
      writeInput: (data) => {
        if (proc === null) return;
        if (this.program === null) this.send(proc, { t: 'input', id, data: data.toString('base64') });
        else this.write(proc, inputFrame(id, data));
      },
    });
  }

  /** The spawner is gone: its starts fail, its tasks are lost (and killed), the next start forks anew. */
  private died(proc: ChildProcess, why: string): void {
    if (this.proc !== proc) return;
    this.proc = null;
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    for (const p of [...this.pending.values()]) {
      // A process it forked but never handed over: nobody else knows its pid.
      if (p.pid !== undefined) killGroup(p.pid);
      if (p.started) p.resolveExit({ code: null, signal: null, lost: why });
      else p.resolveStart(`${why} before the task started`);
    }
  }

  private forget(id: number): void {
    this.pending.delete(id);
    this.refWhileBusy();
  }

  /** Keeps this process alive only while a start or a task is in flight. */
  private refWhileBusy(): void {
    const proc = this.proc;
    if (proc === null) return;
    // The native spawner's stdin is a socket of its own (Node's child stdio pipes are net.Sockets).
    const stdin = proc.stdin as Socket | null;
    if (this.pending.size > 0) {
      proc.ref();
      proc.channel?.ref();
      stdin?.ref();
    } else {
      proc.unref();
      proc.channel?.unref();
      stdin?.unref();
    }
  }

  /** Writes a frame to the native spawner's stdin; false when it is gone. */
  private write(proc: ChildProcess, bytes: Buffer): boolean {
    const stdin = proc.stdin;
    if (stdin === null || stdin.destroyed || !proc.connected) return false;
    stdin.write(bytes);
    return true;
  }

  private send(proc: ChildProcess, m: ToSpawner): boolean {
    if (!proc.connected) return false;
    try {
      proc.send(m, (err: Error | null) => {
        if (err !== null) this.died(proc, `cannot reach the spawner: ${err.message}`);
      });
      return true;
    } catch {
      return false;
    }
  }
}

/**
 * A received pipe, held until its reader comes: the socket starts reading as it arrives, and the start is
 * complete only once every pipe has (one acknowledgement each): a pipe of a task that already exited would
 * end, and close, before anyone listened. The PassThrough keeps its bytes and its end for the log pump;
 * `pipe` keeps the backpressure (the socket pauses while the pump's file is behind), and destroying the
 * PassThrough (the pump's abort) destroys the socket.
 */
function held(socket: Socket): Readable {
  const out = new PassThrough();
  socket.on('error', (err) => out.destroy(err));
  out.on('close', () => socket.destroy());
  socket.pipe(out);
  return out;
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

let shared: Spawner | undefined;

/** This process's spawner, made on first use. */
export function sharedSpawner(): Spawner {
  shared ??= new Spawner();
  return shared;
}
