import { spawnSync } from 'node:child_process';
import { mkdtempSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../../../src/platform/package-root.js';
import { startExecution } from '../../../../worker/local/executor.js';
import type { Launched } from '../../../../worker/local/launch.js';
import { liveGroupMembers } from '../../../../worker/local/process-group.js';
import {
  Spawner as BaseSpawner,
  nativeSpawnerPath,
  type SpawnerProgram,
} from '../../../../worker/local/spawner.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { isLive, makePlan, sh, text } from '../../../support/executor-plan.js';
import { waitFor } from '../../../support/wait.js';

// The spawner (worker/local/spawner.ts, ADR 0032) with real processes: the pipes it hands over lose no
// byte, fd 4 is written and closed, and its death ends its tasks typed, killed, and is survived. Every
// case runs against both programs: the Node one and the native one (ADR 0040; `npm run build` builds it).

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'gpu-broker-spawner-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

function read(stream: Readable | null | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    if (!stream) return resolve('');
    let s = '';
    stream.on('data', (d: Buffer) => {
      s += d.toString('utf8');
    });
    stream.once('end', () => resolve(s));
    stream.once('error', reject);
  });
}

/** A start of /bin/true with no pipes. */
const TRUE = {
  command: '/bin/true',
  args: [],
  env: {},
  cwd: '/',
  statusPipe: false,
  inputPipe: false,
} as const;

const PROGRAMS: ReadonlyArray<Exclude<SpawnerProgram, 'auto'>> = ['node', 'native'];

async function launched(spawner: BaseSpawner, script: string, input = false): Promise<Launched> {
  const l = await spawner.launch({
    command: '/bin/sh',
    args: ['-c', script],
    env: { PATH: '/usr/bin:/bin' },
    cwd: '/',
    statusPipe: true,
    inputPipe: input,
  });
  if (typeof l === 'string') throw new Error(l);
  return l;
}

describe.each(PROGRAMS)('spawner (%s)', (program) => {
  class Spawner extends BaseSpawner {
    constructor(opts: { startTimeoutMs?: number } = {}) {
      super({ ...opts, program });
    }
  }

  it('runs the program it was asked for', async () => {
    const spawner = new Spawner();
    await (await launched(spawner, 'exit 0')).exit;
    const exe = readlinkSync(`/proc/${spawner.pid}/exe`);
    expect(exe).toBe(program === 'native' ? nativeSpawnerPath() : process.execPath);
    expect(spawner.describe()).toMatch(program === 'native' ? /native spawner/ : /Node spawner/);
  });

  it('hands over every byte of tasks that write at once and exit at once, twenty at a time', async () => {
    const spawner = new Spawner();
    // 200 KiB on stdout (more than a pipe holds), a line on stderr and on the status pipe, then exit.
    const script = 'head -c 204800 /dev/zero | tr "\\0" a; echo err >&2; echo st >&3';
    const runs = await Promise.all(
      Array.from({ length: 20 }, async () => {
        const l = await launched(spawner, script);
        const [out, err, st, exit] = await Promise.all([
          read(l.stdio[1]),
          read(l.stdio[2]),
          read(l.stdio[3]),
          l.exit,
        ]);
        return { out: out.length, err, st, exit };
      }),
    );
    for (const r of runs)
      expect(r).toEqual({ out: 204800, err: 'err\n', st: 'st\n', exit: { code: 0, signal: null } });
  });

  it('writes fd 4 once and closes it (bwrap reads its options to the end), and reports a signal death', async () => {
    const spawner = new Spawner();
    const l = await launched(spawner, 'cat <&4; kill -TERM $$', true);
    const out = read(l.stdio[1]);
    l.writeInput(Buffer.from('options\0end\0'));
    expect(await out).toBe('options\0end\0');
    expect(await l.exit).toEqual({ code: null, signal: 'SIGTERM' });
  });

  it('says why a program cannot start, and the process is a new process group', async () => {
    const spawner = new Spawner();
    const missing = await spawner.launch({
      command: '/nonexistent/program',
      args: [],
      env: {},
      cwd: '/',
      statusPipe: false,
      inputPipe: false,
    });
    expect(missing).toMatch(/ENOENT/);
    const l = await launched(spawner, 'sleep 5');
    const stat = (await import('node:fs')).readFileSync(`/proc/${l.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    expect(Number(fields[2])).toBe(l.pid); // pgrp
    process.kill(-l.pid, 'SIGKILL');
    expect(await l.exit).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('starts the process as Node spawn would: exact env, cwd, argv0, a PATH search in the env, its own session', async () => {
    const spawner = new Spawner();
    const l = await spawner.launch({
      command: 'sh', // no slash: searched in the PATH given to the process, not the spawner's
      argv0: 'custom-name',
      args: ['-c', 'echo "$0|$(pwd)|$(env | sort | tr "\\n" ,)"; cat /proc/self/stat >&2'],
      env: { PATH: '/nonexistent:/bin', ODD: 'a "quoted" ü value' },
      cwd: '/usr',
      statusPipe: false,
      inputPipe: false,
    });
    if (typeof l === 'string') throw new Error(l);
    const [out, err] = await Promise.all([read(l.stdio[1]), read(l.stdio[2])]);
    expect(out).toBe('custom-name|/usr|ODD=a "quoted" ü value,PATH=/nonexistent:/bin,PWD=/usr,\n');
    const fields = err.slice(err.lastIndexOf(')') + 2).split(' ');
    expect(Number(fields[3])).toBe(Number(fields[2])); // session id = process group id (setsid)
    expect(await l.exit).toEqual({ code: 0, signal: null });
  });

  it('drops to the asked uid and gid with no supplementary groups', async () => {
    if (process.getuid?.() !== 0) return; // only root can switch (the worker's --run-as)
    const spawner = new Spawner();
    const l = await spawner.launch({
      command: '/bin/sh',
      args: ['-c', 'grep -E "^(Uid|Gid|Groups):" /proc/self/status'],
      env: {},
      cwd: '/',
      uid: 65534,
      gid: 65534,
      statusPipe: false,
      inputPipe: false,
    });
    if (typeof l === 'string') throw new Error(l);
    const out = await read(l.stdio[1]);
    expect(out).toMatch(/^Uid:\t65534\t65534\t65534\t65534$/m);
    expect(out).toMatch(/^Gid:\t65534\t65534\t65534\t65534$/m);
    expect(out).toMatch(/^Groups:\s*$/m);
  });

  it('drops to a uid from 2^31 up (unsigned, as the kernel reads it), and refuses (uid_t)-1 for that start only', async () => {
    if (process.getuid?.() !== 0) return;
    const spawner = new Spawner();
    const start = (id: number) =>
      spawner.launch({
        command: '/bin/sh',
        args: ['-c', 'grep -E "^Uid:" /proc/self/status'],
        env: {},
        cwd: '/',
        uid: id,
        gid: id,
        statusPipe: false,
        inputPipe: false,
      });
    const high = await start(3_000_000_000);
    if (program === 'node')
      expect(high).toMatch(/int32/); // Node's spawn takes int32 ids only: refused in one line
    else {
      if (typeof high === 'string') throw new Error(high);
      expect(await read(high.stdio[1])).toMatch(/^Uid:\t3000000000\t/m);
    }
    expect(await start(4_294_967_295)).toMatch(/EINVAL|uid/);
    // The spawner lives on: the next start works.
    await (await launched(spawner, 'exit 0')).exit;
  });

  it('opens a file read-only at fd 5 of the process (bwrap reads the syscall filter there)', async () => {
    const file = join(root, `fd5-${program}`);
    writeFileSync(file, 'filter bytes');
    const spawner = new Spawner();
    const l = await spawner.launch({
      command: '/bin/sh',
      args: ['-c', 'cat <&5; echo; ls /proc/self/fd | sort -n | tr "\\n" " "'],
      env: { PATH: '/usr/bin:/bin' },
      cwd: '/',
      statusPipe: false,
      inputPipe: false,
      fileAt: { fd: 5, path: file },
    });
    if (typeof l === 'string') throw new Error(l);
    const out = await read(l.stdio[1]);
    expect(out.split('\n')[0]).toBe('filter bytes');
    // 0-2, 5, and the one ls itself opens: no descriptor of the spawner's.
    expect(out.split('\n')[1]?.trim().split(' ').map(Number)).toEqual([0, 1, 2, 3, 5]);
    expect(await spawner.launch({ ...TRUE, fileAt: { fd: 5, path: join(root, 'no-such-file') } })).toMatch(
      /ENOENT/,
    );
    await (await launched(spawner, 'exit 0')).exit;
  });

  it('writes an fd 4 larger than a pipe holds, to its end, while the process reads it slowly', async () => {
    const spawner = new Spawner();
    const l = await launched(spawner, 'sleep 0.3; wc -c <&4', true);
    const out = read(l.stdio[1]);
    l.writeInput(Buffer.alloc(1024 * 1024, 7));
    l.writeInput(Buffer.from('a second write is ignored'));
    expect((await out).trim()).toBe(String(1024 * 1024));
    expect(await l.exit).toEqual({ code: 0, signal: null });
  });

  it('names how each process ended: exit codes, signals, a process that never reads its fd 4', async () => {
    const spawner = new Spawner();
    const ends = await Promise.all(
      ['exit 7', 'kill -KILL $$', 'kill -SEGV $$', 'exec sleep 0.2'].map(async (script) => {
        const l = await launched(spawner, script, true);
        l.writeInput(Buffer.alloc(300 * 1024)); // more than the pipe holds; nobody reads it
        return l.exit;
      }),
    );
    expect(ends).toEqual([
      { code: 7, signal: null },
      { code: null, signal: 'SIGKILL' },
      { code: null, signal: 'SIGSEGV' },
      { code: 0, signal: null },
    ]);
    expect(await (await launched(spawner, 'exit 0')).exit).toEqual({ code: 0, signal: null });
  });

  it('refuses an argument holding a NUL byte, and says why a command cannot run', async () => {
    const spawner = new Spawner();
    const nul = await spawner.launch({ ...TRUE, args: ['a\0b'] });
    expect(nul).toMatch(/NUL|null bytes/);
    const dir = await spawner.launch({ ...TRUE, command: '/tmp' });
    expect(dir).toMatch(/EACCES|EISDIR/);
    const cwd = await spawner.launch({ ...TRUE, cwd: '/nonexistent "dir"' });
    expect(cwd).toMatch(/ENOENT/);
    expect(await (await launched(spawner, 'exit 0')).exit).toEqual({ code: 0, signal: null });
  });

  it('attack: the spawner killed under a running task ends it WORKER_LOST, kills its group, and the next task runs', async () => {
    const spawner = new Spawner();
    const chunks: Chunk[] = [];
    const opts = {
      rootDir: root,
      workerId: 'worker-1',
      provider: 'sim' as const,
      onLog: (stream: 'stdout' | 'stderr', offset: number, data: string) =>
        chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      launcher: spawner,
    };
    // The task forks a child that ignores SIGTERM and would outlive it: neither may survive.
    const handle = startExecution(makePlan({ argv: sh('trap "" TERM; sleep 300 & echo up; wait') }), opts);
    const pgid = await handle.started;
    expect(pgid).not.toBeNull();
    await waitFor(() => text(chunks, 'stdout').includes('up'));
    const spawnerPid = spawner.pid!;
    process.kill(spawnerPid, 'SIGKILL');
    const result = await handle.done;
    expect(result).toMatchObject({ failure_reason: 'WORKER_LOST', exit_code: null, cleaned: true });
    expect(result.log_errors.join('\n')).toMatch(/exit status was lost \(the spawner/);
    expect(isLive(pgid!)).toBe(false);
    // Orphaned by the spawner, reaped by whatever init the host has: only zombies may be left.
    expect(await liveGroupMembers(pgid!)).toEqual([]);

    const next = await startExecution(makePlan({ argv: sh('echo again') }), opts).done;
    expect(next).toMatchObject({ failure_reason: null, exit_code: 0 });
    expect(spawner.pid).not.toBe(spawnerPid);
  });

  it('a request the native spawner cannot parse ends it: its running process is reported lost, the next start works', async () => {
    if (program !== 'native') return; // the Node spawner's requests are Node's own IPC messages
    const spawner = new Spawner();
    const running = await launched(spawner, 'sleep 30');
    const before = spawner.pid!;
    const stdin = (spawner as unknown as { proc: { stdin: NodeJS.WritableStream } }).proc.stdin;
    stdin.write(Buffer.from([2, 0, 0, 0, 0x58, 0])); // a frame of a kind it does not know ('X')
    expect(await running.exit).toMatchObject({
      code: null,
      signal: null,
      lost: expect.stringMatching(/spawner/),
    });
    // The loss is reported when its channel closes, which can come a moment before the process is gone.
    await waitFor(() => !isLive(before), { what: 'the spawner ended on a frame it cannot parse' });
    // The worker killed what the lost spawner had started (ADR 0032).
    await waitFor(() => !isLive(running.pid), { what: 'the lost process killed' });
    const next = await launched(spawner, 'echo fine');
    expect(await read(next.stdio[1])).toBe('fine\n');
    expect(spawner.pid).not.toBe(before);
    // A frame that claims 2 GiB (over the 64 MiB a frame may hold) ends it before it buffers anything.
    const second = spawner.pid!;
    const stdin2 = (spawner as unknown as { proc: { stdin: NodeJS.WritableStream } }).proc.stdin;
    stdin2.write(Buffer.from([0, 0, 0, 0x80]));
    await waitFor(() => !isLive(second), { what: 'the spawner ended on a huge frame' });
    // Once the worker has seen it go (a start sent before then fails SETUP_FAILED, as for any death).
    await waitFor(() => spawner.pid === undefined, { what: 'the worker saw its spawner go' });
    expect(await (await launched(spawner, 'exit 0')).exit).toEqual({ code: 0, signal: null });
  });

  it('attack: a spawner that stops answering is killed after the start timeout; the start fails, the next one works', async () => {
    const spawner = new Spawner({ startTimeoutMs: 2000 });
    const first = await launched(spawner, 'exit 0');
    await first.exit;
    const stuck = spawner.pid!;
    process.kill(stuck, 'SIGSTOP');
    const failed = await spawner.launch(TRUE);
    expect(failed).toMatch(/spawner .*before the task started/);
    await waitFor(() => !isLive(stuck));
    const next = await launched(spawner, 'echo fine');
    expect(await read(next.stdio[1])).toBe('fine\n');
    expect(spawner.pid).not.toBe(stuck);
  });

  it('a worker whose own event loop stalls past the start timeout keeps its spawner and its tasks', async () => {
    // Timers run before pending I/O: the spawner's answers are already waiting when the timeout fires.
    const spawner = new Spawner({ startTimeoutMs: 300 });
    const a = await launched(spawner, 'sleep 30');
    const spawnerPid = spawner.pid;
    let aEnded = false;
    void a.exit.then(() => {
      aEnded = true;
    });
    const b = spawner.launch(TRUE);
    const until = Date.now() + 800;
    while (Date.now() < until); // a stall of the worker's loop (a long synchronous step, GC)
    const started = await b;
    expect(typeof started).not.toBe('string');
    if (typeof started !== 'string') await started.exit;
    expect(spawner.pid).toBe(spawnerPid);
    expect(aEnded).toBe(false);
    process.kill(-a.pid, 'SIGKILL');
    expect(await a.exit).toMatchObject({ signal: 'SIGKILL' });
  });

  it('a start that fails after some of its pipes arrived closes them (no descriptor left open)', async () => {
    const spawner = new Spawner();
    // The spawner "dies" right after the first pipe arrived (its death handled as the worker would).
    const inside = spawner as unknown as {
      onMessage(m: { t: string }, handle: unknown): void;
      died(proc: unknown, why: string): void;
      proc: unknown;
    };
    const onMessage = inside.onMessage.bind(spawner);
    let arrived: Socket | undefined;
    inside.onMessage = (m, handle) => {
      onMessage(m, handle);
      if (m.t === 'fd' && arrived === undefined) {
        arrived = handle as Socket;
        inside.died(inside.proc, 'the spawner exited (test)');
      }
    };
    // The task writes far more than a pipe holds, so a pipe nobody reads stays paused, never at its end.
    const r = await spawner.launch({
      command: '/bin/sh',
      args: ['-c', 'head -c 1000000 /dev/zero; sleep 30'],
      env: { PATH: '/usr/bin:/bin' },
      cwd: '/',
      statusPipe: true,
      inputPipe: false,
    });
    expect(r).toMatch(/before the task started/);
    expect(arrived).toBeDefined();
    await waitFor(() => arrived!.destroyed, { what: 'the handed-over pipe closed' });
  });

  it('attack: a descriptor the worker inherited without close-on-exec never reaches a task', () => {
    // A "worker" process started with fd 20 open and not close-on-exec (as a shell or a service manager
    // may hand one down); its spawner starts a task that lists its fds.
    const spawnerJs = join(packageRoot(), 'dist', 'worker', 'local', 'spawner.js');
    const worker = `
      const { Spawner } = await import(${JSON.stringify(spawnerJs)});
      const s = new Spawner({ program: ${JSON.stringify(program)} });
      const l = await s.launch({ command: '/bin/ls', args: ['-l', '/proc/self/fd'],
        env: {}, cwd: '/', statusPipe: false, inputPipe: false });
      if (typeof l === 'string') throw new Error(l);
      let out = '';
      l.stdio[1].on('data', (d) => { out += d; });
      const closed = new Promise((r) => l.stdio[1].once('close', r));
      await Promise.all([l.exit, closed]);
      process.stdout.write(out);
      process.exit(0);`;
    // bash, not sh: dash takes only single-digit descriptors in a redirection.
    const r = spawnSync(
      '/bin/bash',
      ['-c', 'exec "$0" --input-type=module -e "$1" 20</dev/null', process.execPath, worker],
      {
        encoding: 'utf8',
        timeout: 20_000,
      },
    );
    expect(r.stderr).toBe('');
    // ls's own descriptors: 0–2 and the one it reads /proc/self/fd through.
    const fds = [...r.stdout.matchAll(/ (\d+) -> (.*)$/gm)]
      .filter((m) => !/^\/proc\/\d+\/fd$/.test(m[2] ?? ''))
      .map((m) => m[1]);
    expect(fds).toEqual(['0', '1', '2']);
  });
});
