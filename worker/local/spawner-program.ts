import { type ChildProcess, type StdioOptions, spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import type { Readable } from 'node:stream';
import type { FromSpawner, ToSpawner } from './spawner-messages.js';

/**
 * The Node spawner: a small process the worker forks once (spawner.ts, when the native one is not built)
 * and asks over its IPC channel to start each task process, so that a task is never forked from the
 * worker's own large address space. It runs as a program of its own (`node dist/worker/local/
 * spawner-program.js`, no inherited node options, 64 MiB heap); it imports nothing of the worker's.
 */

const O_CLOEXEC = 0o2000000;

// Descriptors the worker inherited without close-on-exec (from whoever started it) would reach every
// task through this process: close each one above stderr that lacks O_CLOEXEC. Node's own descriptors
// (the IPC channel, libuv's) all carry it.
for (const name of readdirSync('/proc/self/fd')) {
  const fd = Number(name);
  if (!(fd > 2)) continue;
  try {
    const flags = /^flags:\s*([0-7]+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'));
    if (flags && (Number.parseInt(flags[1] as string, 8) & O_CLOEXEC) === 0) closeSync(fd);
  } catch {
    // gone meanwhile (the readdir's own descriptor)
  }
}

const kids = new Map<number, ChildProcess>();

function send(m: FromSpawner, handle?: Readable): void {
  try {
    // A pipe's handle travels with its message (Node's IPC passes the descriptor).
    (process.send as (m: unknown, h?: unknown) => boolean)(m, handle);
  } catch {
    // the worker is gone: 'disconnect' ends this process
  }
}

const messageOf = (e: unknown) => String((e instanceof Error && e.message) || e);

/** The handle of a child's pipe, which Node starts reading at once: stopped, so its bytes stay for the worker. */
interface PipeInternals {
  _handle?: { reading: boolean; readStop(): void } | null;
  readable: boolean;
}

function start(m: Extract<ToSpawner, { t: 'spawn' }>): void {
  let c: ChildProcess;
  let opened: number | undefined;
  const stdio: Array<'pipe' | 'ignore' | number> = [...m.stdio];
  try {
    if (m.fileAt) {
      opened = openSync(m.fileAt.path, 'r');
      while (stdio.length < m.fileAt.fd) stdio.push('ignore');
      stdio[m.fileAt.fd] = opened;
    }
    c = spawn(m.command, [...m.args], {
      cwd: m.cwd,
      env: m.env,
      detached: true,
      stdio: stdio as StdioOptions,
      ...(m.argv0 === undefined ? {} : { argv0: m.argv0 }),
      ...(m.uid === undefined ? {} : { uid: m.uid, gid: m.gid as number }),
    });
  } catch (e) {
    send({ t: 'error', id: m.id, message: messageOf(e) });
    return;
  } finally {
    if (opened !== undefined) closeSync(opened);
  }
  if (c.pid === undefined) {
    c.once('error', (e) => send({ t: 'error', id: m.id, message: messageOf(e) }));
    return;
  }
  c.on('error', () => {});
  kids.set(m.id, c);
  const give: number[] = [];
  m.stdio.forEach((s, fd) => {
    if (s !== 'pipe' || fd === 4) return;
    const pipe = c.stdio[fd] as unknown as PipeInternals | null;
    if (!pipe) return;
    if (pipe._handle) {
      pipe._handle.reading = false;
      pipe._handle.readStop();
    }
    pipe.readable = false;
    give.push(fd);
  });
  send({ t: 'spawned', id: m.id, pid: c.pid });
  for (const fd of give) send({ t: 'fd', id: m.id, fd }, c.stdio[fd] as Readable);
  c.once('exit', (code, signal) => {
    kids.delete(m.id);
    send({ t: 'exit', id: m.id, code, signal });
  });
}

process.on('message', (m: ToSpawner) => {
  if (m.t === 'spawn') start(m);
  else if (m.t === 'input') {
    const w = kids.get(m.id)?.stdio[4];
    // Once only: a second end() would destroy the stream with the first bytes still unwritten.
    if (w && 'writableEnded' in w && !w.writableEnded) {
      w.on('error', () => {});
      w.end(Buffer.from(m.data, 'base64'));
    }
  }
});
process.on('disconnect', () => process.exit(0));
