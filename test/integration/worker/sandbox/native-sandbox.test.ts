import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimSampler } from '../../../../worker/samplers/sim-sampler.js';
import { bwrapArgs, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { probeCgroups } from '../../../../worker/sandbox/cgroups.js';
import { HELPER_ENV } from '../../../../worker/sandbox/helper-commands.js';
import { unsafeToRunAsRoot } from '../../../../worker/sandbox/native.js';
import { prepareSandbox } from '../../../../worker/sandbox/setup.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';
import { waitFor } from '../../../support/wait.js';

// The native sandbox (worker/sandbox/native/gpu-broker-sandbox.c, ADR 0038) started directly, as the
// worker starts it: options through a pipe, status on fd 3. The executor suites (executor-sandbox,
// executor-limits, sandbox-env) run their attacks against it too; these pin what is its own: the uid
// drop, the descriptors a task holds, the root it stands on and the options it refuses.

const native = SANDBOX_ENGINES.find((e) => e.native !== null)?.native ?? null;
const nativeReady = requireOrSkip('the native sandbox', native !== null, 'a root host, after npm run build');
const UID = 2_000_400_001;
const hierarchy = native !== null ? await probeCgroups({ root: true }) : null;
const cgroupsReady = requireOrSkip(
  'a writable cgroup hierarchy',
  hierarchy !== null,
  'root with cgroupfs mounted read-write',
);

let dir: string;
let taskDir: string;
beforeAll(() => {
  if (native === null) return;
  dir = mkdtempSync(join('/var/tmp', 'gpu-broker-native-'));
  taskDir = join(dir, 'task');
  mkdirSync(taskDir);
  chmodSync(taskDir, 0o777);
});
afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** A task's options as bwrapArgs makes them for a root worker using the native sandbox, with `extra` before `--chdir`. */
function options(extra: string[] = []): string[] {
  const args = bwrapArgs({
    system: systemMounts(),
    taskDir,
    hidden: [{ path: dir, kind: 'dir' }],
    pinned: [],
    devices: [],
    network: 'none',
    identity: { uid: UID, gid: UID, native: true },
    statusFd: 3,
    argv: ['/bin/true'],
    tmpfsBytes: { tmp: 4 * 1024 * 1024, shm: 4 * 1024 * 1024 },
    taskEnv: { vars: { PATH: '/usr/bin:/bin' }, envHelper: '/usr/bin/env', bwrapEnvNames: [] },
  });
  // The options end at `--chdir /task`; what follows `--` is the command, given by each test.
  const chdir = args.indexOf('--chdir');
  return [...args.slice(0, chdir), ...extra, ...args.slice(chdir, chdir + 2)];
}

const data = (opts: readonly string[]) => Buffer.from(opts.map((o) => `${o}\0`).join(''));

/** Runs `argv` in the native sandbox with `opts` on fd 4; its stdout, stderr, status (fd 3) and exit code. */
function run(argv: string[], opts: string[] | Buffer = options()) {
  // spawnSync writes no fd but stdin: the options go in through a file on fd 4, the status to stdout.
  const file = join(dir, `opts-${process.hrtime.bigint()}`);
  writeFileSync(file, Buffer.isBuffer(opts) ? opts : data(opts));
  const sh = spawnSync(
    '/bin/sh',
    ['-c', 'exec "$0" --args 4 -- "$@" 4<"$OPTS" 3>&1 1>"$OUT"', native!, ...argv],
    {
      env: { ...HELPER_ENV, OPTS: file, OUT: `${file}.out` },
      encoding: 'utf8',
      timeout: 20_000,
    },
  );
  const stdout = existsSync(`${file}.out`) ? readFileSync(`${file}.out`, 'utf8') : '';
  rmSync(file, { force: true });
  rmSync(`${file}.out`, { force: true });
  return { stdout, status: sh.stdout, stderr: sh.stderr, code: sh.status };
}

describe.runIf(nativeReady)('the native sandbox, started directly', () => {
  it('runs the task as its uid, with no group, no capability in any set and no_new_privs', () => {
    const r = run([
      '/bin/sh',
      '-c',
      'grep -E "^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs):" /proc/self/status',
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = Object.fromEntries(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(':\t') as [string, string]),
    );
    expect(lines['Uid']).toBe(`${UID}\t${UID}\t${UID}\t${UID}`);
    expect(lines['Gid']).toBe(`${UID}\t${UID}\t${UID}\t${UID}`);
    expect(lines['Groups']?.trim() ?? '').toBe('');
    for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
      expect(lines[set]).toBe('0000000000000000');
    expect(lines['NoNewPrivs']).toBe('1');
  });

  it("gives the task its starter's umask, not the 0 the sandbox makes its mounts with", () => {
    const mask = process.umask();
    expect(mask).not.toBe(0);
    const r = run(['/bin/sh', '-c', 'umask; touch /task/umask-probe; stat -c %a /task/umask-probe']);
    expect(r.stdout.split('\n').slice(0, 2)).toEqual([
      mask.toString(8).padStart(4, '0'),
      (0o666 & ~mask).toString(8),
    ]);
  });

  it('runs a uid past 2^31 (the default task uid range reaches 3999999999)', () => {
    const high = options().map((o, i, a) =>
      a[i - 1] === '--uid' || a[i - 1] === '--gid' ? '3999999999' : o,
    );
    const r = run(['/bin/sh', '-c', 'id -u; id -g'], high);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('3999999999\n3999999999\n');
  });

  it('leaves the init, once the task runs, with no capability and no_new_privs (it only reaps)', () => {
    const r = run(['/bin/sh', '-c', 'grep -E "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):" /proc/1/status']);
    expect(r.stderr).toBe('');
    const lines = Object.fromEntries(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split(':\t') as [string, string]),
    );
    for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
      expect(lines[set]).toBe('0000000000000000');
    expect(lines['NoNewPrivs']).toBe('1');
  });

  it("gives the task a session keyring of its own: the starter's keys are not there, and nothing it adds reaches the next task (attack)", () => {
    // A parent with a key in its session keyring (as a service's worker may have) runs two tasks.
    const keyctl = `
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def search(name): return libc.syscall(250, 10, -3, b"user", name, 0)
if sys.argv[1] == "parent":
    libc.syscall(250, 1, None)
    assert libc.syscall(248, b"user", b"worker-secret", b"hunter2", 7, -3) > 0
    assert search(b"worker-secret") > 0
    for step in ("first", "second"):
        subprocess.run(["/bin/sh", "-c", 'exec "$0" --args 4 -- /usr/bin/python3 -c "$KEYCTL" "$1" 4<"$OPTS" 3>/dev/null', sys.argv[2], step], check=False)
else:
    print(sys.argv[1], "sees", "worker-secret" if search(b"worker-secret") > 0 else "no-worker-secret", "planted" if search(b"planted") > 0 else "no-planted")
    if sys.argv[1] == "first": print("add", libc.syscall(248, b"user", b"planted", b"x", 1, -3) > 0)
`;
    const file = join(dir, 'opts-keys');
    writeFileSync(file, data(options()));
    const r = spawnSync('/usr/bin/python3', ['-c', keyctl, 'parent', native!], {
      env: { ...HELPER_ENV, OPTS: file, KEYCTL: keyctl },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(
      'first sees no-worker-secret no-planted\nadd True\nsecond sees no-worker-secret no-planted\n',
    );
  });

  it('starts the task with default signal dispositions, whatever its starter ignored', () => {
    // A starter ignoring SIGCHLD made the kernel reap the init's children before it could wait.
    const file = join(dir, 'opts-signals');
    writeFileSync(file, data(options()));
    const r = spawnSync(
      '/bin/sh',
      [
        '-c',
        'trap "" CHLD TERM INT; exec "$0" --args 4 -- /bin/sh -c "grep SigIgn /proc/self/status; exit 5" 4<"$OPTS" 3>"$OPTS.status"',
        native!,
      ],
      { env: { ...HELPER_ENV, OPTS: file }, encoding: 'utf8', timeout: 20_000 },
    );
    expect(r.status).toBe(5);
    expect(r.stdout).toBe('SigIgn:\t0000000000000000\n');
    expect(readFileSync(`${file}.status`, 'utf8')).toContain('{ "exit-code": 5 }');
  });

  it('runs a script without a #! line through /bin/sh, as execvp does', () => {
    writeFileSync(join(taskDir, 'no-shebang'), 'echo "ran as $0 with $1"\n', { mode: 0o755 });
    const r = run(['/task/no-shebang', 'arg']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('ran as /task/no-shebang with arg\n');
  });

  it('reports the init and its namespaces, then the exit code, on the status fd', () => {
    const r = run(['/bin/sh', '-c', 'exit 7']);
    expect(r.code).toBe(7);
    const [first, second] = r.status
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    expect(first?.['child-pid']).toBeGreaterThan(1);
    const ownPidNs = statSync('/proc/self/ns/pid').ino;
    expect(first?.['pid-namespace']).toBeGreaterThan(0);
    expect(first?.['pid-namespace']).not.toBe(ownPidNs);
    expect(second).toEqual({ 'exit-code': 7 });
    const killed = run(['/bin/sh', '-c', 'kill -KILL $$']);
    expect(killed.code).toBe(128 + 9);
  });

  it('the task holds only stdin, stdout and stderr: never the status pipe (attack: write a fake child-pid)', () => {
    const r = run([
      '/bin/sh',
      '-c',
      'ls /proc/$$/fd; echo \'{ "child-pid": 1 }\' >&3 || echo no-fd-3; echo \'{ "child-pid": 1 }\' >&4 || echo no-fd-4',
    ]);
    expect(r.stdout.split('\n').filter((l) => /^\d+$/.test(l))).toEqual(['0', '1', '2']);
    expect(r.stdout).toContain('no-fd-3');
    expect(r.stdout).toContain('no-fd-4');
    expect(r.status).not.toContain('"child-pid": 1 }');
  });

  it("stands on a read-only root of its own: the host's tree is gone, and nothing can be made beside the mounts", () => {
    writeFileSync(join(dir, 'secret'), 'host secret');
    const r = run([
      '/bin/sh',
      '-c',
      [
        'touch /newfile 2>/dev/null && echo made-file',
        'mkdir /newdir 2>/dev/null && echo made-dir',
        `cat ${dir}/secret 2>/dev/null && echo read-secret`,
        'ls /proc/1/root/ >/dev/null 2>&1 && echo init-root',
        '(echo x > /proc/sys/kernel/hostname) 2>/dev/null && echo wrote-proc-sys',
        'touch /usr/x 2>/dev/null && echo wrote-usr',
        'ls /tmp | wc -l',
        'echo $(ls /dev)',
        'cat /proc/self/mountinfo | grep -c "/work\\|/root\\|/home" || true',
        'hostname',
        'touch /task/scratch && echo task-writable',
      ].join('; '),
    ]);
    expect(r.stderr).toBe('');
    for (const leak of ['made-file', 'made-dir', 'read-secret', 'init-root', 'wrote-proc-sys', 'wrote-usr'])
      expect(r.stdout).not.toContain(leak);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toBe('0');
    expect(lines[1]?.trim().split(' ').sort()).toEqual(
      [
        'core',
        'fd',
        'full',
        'null',
        'ptmx',
        'pts',
        'random',
        'shm',
        'stderr',
        'stdin',
        'stdout',
        'tty',
        'urandom',
        'zero',
      ].sort(),
    );
    expect(lines[2]).toBe('0');
    expect(lines[3]).toBe('gpu-broker-task');
    expect(lines[4]).toBe('task-writable');
  });

  it('execs through the task PATH: 127 when the program is missing, 126 when it cannot be run', () => {
    const missing = run(['no-such-program']);
    expect(missing.code).toBe(127);
    expect(missing.stderr).toMatch(/cannot run no-such-program: No such file or directory/);
    writeFileSync(join(taskDir, 'not-exec'), '#!/bin/sh\necho hi\n', { mode: 0o644 });
    const notExec = run(['/task/not-exec']);
    expect(notExec.code).toBe(126);
    expect(run(['true']).code).toBe(0);
  });

  it('a killed sandbox takes its task and everything the task started with it (die-with-parent)', async () => {
    const marker = `native-orphan-${process.pid}-${Date.now()}`;
    const file = join(dir, 'opts-orphan');
    writeFileSync(file, data(options()));
    const child: ChildProcess = spawn(
      '/bin/sh',
      [
        '-c',
        'exec "$0" --args 4 -- "$@" 4<"$OPTS" 3>/dev/null',
        native!,
        '/bin/sh',
        '-c',
        `setsid /bin/sh -c 'sleep 300; : ${marker}' & sleep 300; : ${marker}`,
      ],
      { env: { ...HELPER_ENV, OPTS: file }, stdio: 'ignore' },
    );
    const withMarker = () =>
      readdirSync('/proc')
        .filter((p) => /^\d+$/.test(p))
        .filter((p) => {
          try {
            return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(marker);
          } catch {
            return false;
          }
        });
    await waitFor(() => withMarker().length >= 2, { timeoutMs: 10_000 });
    child.kill('SIGKILL');
    await waitFor(() => withMarker().length === 0, { timeoutMs: 10_000 });
  });

  it.runIf(cgroupsReady)(
    'moves itself into the cgroups named by --cgroup-procs before it starts anything: the task and its init are born there',
    async () => {
      const cg = await hierarchy!.create(`native-join-${process.pid}-${Date.now()}`, {
        memoryBytes: 256 * 1024 * 1024,
        pids: 16,
        cpuWeight: 100,
      });
      const file = join(dir, 'opts-join');
      const procsFiles = cg.dirs.map((d) => join(d, 'cgroup.procs'));
      writeFileSync(file, data(options(procsFiles.flatMap((f) => ['--cgroup-procs', f]))));
      const child: ChildProcess = spawn(
        '/bin/sh',
        ['-c', 'exec "$0" --args 4 -- "$@" 4<"$OPTS" 3>/dev/null', native!, '/bin/sleep', '30'],
        { env: { ...HELPER_ENV, OPTS: file }, stdio: 'ignore' },
      );
      try {
        // The sandbox itself (the sh exec'd into it), its init and the task: read back from the kernel, in every controller.
        await waitFor(async () => (await cg.procs()).length >= 3, { timeoutMs: 10_000 });
        for (const procs of procsFiles) {
          const pids = readFileSync(procs, 'utf8').trim().split('\n').map(Number);
          expect(pids).toContain(child.pid);
          expect(pids.length).toBeGreaterThanOrEqual(3);
        }
      } finally {
        child.kill('SIGKILL');
        await cg.killAll();
        await cg.remove();
      }
    },
  );

  const refusals: Array<[string, () => string[] | Buffer, RegExp]> = [
    ['an unknown option', () => options(['--bind-try', '/', '/x']), /unknown option "--bind-try"/],
    ['uid 0', () => options(['--uid', '0']), /--uid must be an id from 1 to 4294967294/],
    [
      'no uid',
      () => options().filter((o, i, a) => o !== '--uid' && a[i - 1] !== '--uid'),
      /--uid and --gid are required/,
    ],
    ['no PID namespace', () => options().filter((o) => o !== '--unshare-pid'), /--unshare-pid is required/],
    [
      'a relative destination',
      () => options(['--tmpfs', 'tmp2']),
      /destination "tmp2" is not an absolute path/,
    ],
    [
      'a ".." in a source',
      () => options(['--ro-bind', '/usr/../etc', '/x']),
      /source "\/usr\/..\/etc" is not an absolute path/,
    ],
    [
      '--perms before a bind',
      () => options(['--perms', '0700', '--bind', '/usr', '/x']),
      /--perms applies to --tmpfs or --dir/,
    ],
    ['a negative size', () => options(['--size', '-1', '--tmpfs', '/x']), /--size: not a byte count/],
    [
      'a relative cgroup file',
      () => options(['--cgroup-procs', 'sys/fs/cgroup/cgroup.procs']),
      /--cgroup-procs needs an absolute, clean path/,
    ],
    [
      'a cgroup that does not exist (it never runs outside the cgroup it was given)',
      () => options(['--cgroup-procs', '/sys/fs/cgroup/no-such-gpu-broker-cgroup/cgroup.procs']),
      /--cgroup-procs \/sys\/fs\/cgroup\/no-such-gpu-broker-cgroup\/cgroup.procs: No such file/,
    ],
    ['an env name with "="', () => options(['--setenv', 'A=B', 'c']), /--setenv: invalid name/],
    ['a missing argument', () => options(['--hostname']).slice(0, -2), /needs 1 argument/],
    ['options not ended by a NUL', () => Buffer.from('--unshare-pid'), /do not end with a NUL byte/],
    ['16 MiB of options', () => Buffer.alloc(17 * 1024 * 1024, 0x41), /options over/],
    [
      'a source that does not exist',
      () => options(['--ro-bind', '/no/such/dir', '/x']),
      /cannot bind \/no\/such\/dir/,
    ],
  ];
  it.each(refusals)('refuses %s with a message, and runs nothing', (_name, opts, message) => {
    const marker = join(taskDir, `ran-${process.hrtime.bigint()}`);
    const r = run(['/usr/bin/touch', marker], opts());
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(message);
    expect(existsSync(marker)).toBe(false);
  });

  it('refuses to run as anyone but root', () => {
    const r = spawnSync(
      'setpriv',
      ['--reuid=65534', '--regid=65534', '--clear-groups', native!, '--args', '0', '--', '/bin/true'],
      {
        input: data(options()),
        encoding: 'utf8',
      },
    );
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/must run as root/);
  });
});

describe.runIf(requireOrSkip('root', isRoot, 'the checks read file owners'))(
  'whether the native sandbox may be run as root',
  () => {
    it('only when it and every dir above it are root-owned and writable by nobody else', () => {
      const base = mkdtempSync(join(tmpdir(), 'gpu-broker-native-path-'));
      const bin = join(base, 'gpu-broker-sandbox');
      writeFileSync(bin, '', { mode: 0o755 });
      chmodSync(base, 0o755);
      expect(unsafeToRunAsRoot(bin)).toBeNull();
      chmodSync(bin, 0o775);
      expect(unsafeToRunAsRoot(bin)).toMatch(/writable by group or others/);
      chmodSync(bin, 0o755);
      chmodSync(base, 0o777);
      expect(unsafeToRunAsRoot(bin)).toMatch(/writable by group or others/);
      chmodSync(base, 0o755);
      spawnSync('chown', ['65534', bin]);
      expect(unsafeToRunAsRoot(bin)).toMatch(/owned by uid 65534/);
      expect(unsafeToRunAsRoot(join(base, 'missing'))).toMatch(/does not exist/);
      rmSync(base, { recursive: true, force: true });
    });
  },
);

describe.runIf(nativeReady)('which engine a root worker uses (--sandbox-engine)', () => {
  const choose = (over: Partial<Parameters<typeof prepareSandbox>[0]>) =>
    prepareSandbox({
      isolation: 'bwrap',
      dataDir: join(dir, `worker-${process.hrtime.bigint()}`),
      sampler: new SimSampler({ count: 1, seed: 'engine' }),
      cgroups: null,
      ...over,
    });

  it('auto: the native sandbox when it is built, safe and working; bwrap says why not otherwise', async () => {
    const chosen = await choose({});
    expect(chosen.setup.kind === 'bwrap' && chosen.setup.native).toBe(native);
    expect(chosen.summary).toMatch(/sandboxed: the native sandbox .*bwrap's layout/);
    // A copy anyone may replace (its dir is group-writable) is never run as root.
    const loose = mkdtempSync(join(tmpdir(), 'gpu-broker-loose-'));
    chmodSync(loose, 0o775);
    const copy = join(loose, 'gpu-broker-sandbox');
    writeFileSync(copy, readFileSync(native!), { mode: 0o755 });
    const refused = await choose({ nativeSandbox: copy });
    expect(refused.setup.kind === 'bwrap' && refused.setup.native).toBeNull();
    expect(refused.summary).toMatch(/bubblewrap .*\(not the native sandbox: .*writable by group or others/);
    rmSync(loose, { recursive: true, force: true });
  });

  it('bwrap never probes it; native refuses to start without it, saying how to build it', async () => {
    const bwrap = await choose({ sandboxEngine: 'bwrap' });
    expect(bwrap.setup.kind === 'bwrap' && bwrap.setup.native).toBeNull();
    expect(bwrap.summary).not.toContain('native');
    await expect(choose({ sandboxEngine: 'native', nativeSandbox: join(dir, 'missing') })).rejects.toThrow(
      /--sandbox-engine native: the native sandbox is not built .*npm run build/,
    );
  });
});
