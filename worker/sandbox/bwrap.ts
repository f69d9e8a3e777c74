import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import type { NetworkMode } from '../../src/contracts/task-spec.js';
import { SANDBOX_TASK_DIR } from '../task-io/layout.js';
import type { DeviceNode } from './devices.js';
import { findHelper, HELPER_ENV, HELPER_PATH } from './helper-commands.js';
import {
  ancestorDirs,
  outermost,
  rehiddenBelow,
  type SystemMounts,
  systemArgs,
  systemMounts,
} from './host-mounts.js';

// Re-exported so that the splits (helper-commands.ts, host-mounts.ts) change no importer.
export { findOnPath } from './helper-commands.js';
export {
  ALWAYS_HIDDEN,
  hiddenMounts,
  programBinds,
  rehiddenBelow,
  SYSTEM_DIRS,
  SYSTEM_LINKS_OR_DIRS,
  type SystemMounts,
  systemMounts,
} from './host-mounts.js';

/**
 * The bubblewrap sandbox every `process` task runs in (docs/security.md).
 *
 * What the task sees, in mount order (later mounts win), on an empty root of its own:
 *   1. the host's system directories read-only (SYSTEM_DIRS: /usr, /etc, /opt, /var, /sys and the
 *      /bin, /lib… links or dirs); nothing else of the host, so /home, /root, /tmp, /srv, /run (with
 *      its sockets) and the data dirs elsewhere are simply absent;
 *   2. hidden paths inside those covered by an empty tmpfs (directories) or /dev/null (files): the
 *      worker's and the master's data dirs, /root, /home, the policy's `hidden_paths`;
 *   3. a fresh /proc of its own PID namespace, a minimal /dev, a private /tmp and /dev/shm (1777), each
 *      a tmpfs of the size the task's limits give (sandbox/limits.ts); then the kernel files no task
 *      reads covered (MASKED_KERNEL_PATHS: /proc/key-users, the host's /sys/fs/cgroup, /proc/kcore…);
 *   4. the task's executable and the files the policy pins (an interpreter's script and its directory)
 *      bound read-only at their own path, so a script the reviewer approved runs wherever it lives
 *      (the directories above it made 0755, see ancestorDirs in host-mounts.ts);
 *   5. the leased cards' device nodes only (devices.ts);
 *   6. its execution dir at `/task` (writable; outputs under `/task/out`), which is also its cwd;
 *   7. its inputs (ADR 0012) read-only over it: each top-level entry of the execution's `inputs/` dir
 *      bound with --ro-bind at `/task/<entry>` (so `/task/src/train.py` cannot be written, renamed or
 *      removed, while the task may still create scratch files beside it);
 *   8. the named data mounts the spec asked for, at `/mnt/<name>`, read-only unless the operator said
 *      otherwise;
 *   9. every hidden path that lies below a pinned directory or a mount covered again where that bind
 *      shows it (`rehiddenBelow`): a hidden path stays hidden wherever the host tree reappears.
 *
 * Namespaces: PID, mount, IPC, UTS, cgroup (where the kernel has it) and, unless the reviewed spec says
 * `network: "host"`, network (loopback only). bwrap's own init is PID 1: when the task's first process
 * exits, the init exits and the kernel kills every other process of the namespace, `setsid` children
 * included; `--die-with-parent` does the same when the worker dies.
 *
 * Identity: a root worker runs bwrap as root (so it can bind its own 0700 dirs) and the task through
 * `setpriv` as a uid of its own (task-uids.ts) with no capabilities and no_new_privs, so setuid binaries
 * on the read-only host gain nothing. A worker that is not root runs bwrap in a user namespace: the task
 * keeps the worker's uid on the host, with its own namespaces around it.
 *
 * Environment (docs/security.md "Code the reviewer did not read"): the spec's env reaches the task's own process and nothing before it. bwrap
 * runs with the fixed helper env (HELPER_ENV and the execution id). An unprivileged bwrap execs the task
 * itself: `--unsetenv` drops its own names the task does not set and `--setenv` applies the task's env
 * at that exec. A root bwrap execs setpriv with its own fixed env, and setpriv (now the task's uid, no
 * capabilities, no_new_privs) execs `env -i -- NAME=VALUE… argv`, whose own start-up sees no task
 * variable either: so no ld.so variable (LD_DEBUG_OUTPUT, LD_PROFILE…), no locale or shell variable of
 * the spec is ever read by a process running as root. (`--clearenv` would do in one option what
 * `--unsetenv` does per name, but only from bubblewrap 0.5 on.) bwrap's options (every host path: data dirs,
 * hidden paths, the task dir) travel through a pipe (`--args`), so the sandbox's PID 1, whose command
 * line the task can read at /proc/1/cmdline, shows only `bwrap --args 4 -- <command>`.
 */

/** Everything `bwrapArgs` needs; all paths are absolute host paths. */
export interface BwrapRequest {
  /** The host's system tree (systemMounts()). */
  readonly system: SystemMounts;
  /** The host directory bound writable at SANDBOX_TASK_DIR. */
  readonly taskDir: string;
  /**
   * Paths to hide (data dirs, policy `hidden_paths`); nonexistent ones are skipped by the caller. Those
   * below another are covered only where a pinned dir or a mount shows them again (step 9).
   */
  readonly hidden: ReadonlyArray<{ path: string; kind: 'dir' | 'file' }>;
  /** Files or dirs bound read-only at their own path after hiding (executable, pinned script's dir). */
  readonly pinned: readonly string[];
  /** Device nodes to bind (leased cards and their control nodes). */
  readonly devices: readonly DeviceNode[];
  /** `none` unshares the network (loopback only); `host` keeps the host's. */
  readonly network: NetworkMode;
  /**
   * The uid/gid the task runs as when the sandbox is made as root: through setpriv (bwrap), or by the
   * native sandbox itself (`native`, ADR 0038: `--uid`/`--gid`/`--setenv`, no setpriv or env); null when
   * bwrap runs unprivileged.
   */
  readonly identity:
    | { uid: number; gid: number; setpriv: string }
    | {
        uid: number;
        gid: number;
        native: true;
        /** The task's cgroup.procs files: the native sandbox moves itself in first (`--cgroup-procs`). */
        cgroupProcs?: readonly string[];
      }
    | null;
  /**
   * File descriptor (in bwrap's stdio) where bwrap writes its JSON status (child pid, namespaces, exit);
   * null for none (a Slurm rank learns that the sandbox came up from a shim instead, see job-wrapper.ts).
   */
  readonly statusFd: number | null;
  /** The task's argv. */
  readonly argv: readonly string[];
  /**
   * The task's syscall filter (seccomp.ts): the native sandbox takes the program itself (`--seccomp-bpf`),
   * bwrap reads it from a descriptor the launcher opened (`--seccomp FD`). Absent: none.
   */
  readonly seccomp?: { readonly program: Buffer } | { readonly fd: number };
  /** Sizes of the private /tmp and /dev/shm in bytes (the task's limits); absent: the kernel's default, half the RAM. */
  readonly tmpfsBytes?: { readonly tmp: number; readonly shm: number };
  /** The placed inputs (task-io/inputs.ts): their host dir and its top-level names. */
  readonly inputs?: { readonly dir: string; readonly entries: readonly string[] };
  /** Named data mounts the spec asked for, as this worker's operator declared them. */
  readonly mounts?: ReadonlyArray<{
    readonly hostPath: string;
    readonly inside: string;
    readonly readOnly: boolean;
  }>;
  /**
   * The task's environment, applied only to the task's own exec (see the module comment); `envHelper`
   * is the absolute path of `env`, run after setpriv's uid drop. Absent: bwrap's children inherit
   * bwrap's own environment (the Slurm rank wrapper sets it up itself).
   */
  readonly taskEnv?: {
    readonly vars: Readonly<Record<string, string>>;
    readonly envHelper: string;
    /** The names in bwrap's own environment: an unprivileged bwrap unsets those the task does not set. */
    readonly bwrapEnvNames: readonly string[];
    /**
     * Behind setpriv: the task's env as a file (`taskEnvData`, NUL-ended NAME=VALUE entries) bound
     * read-only at TASK_ENV_FILE, and the bash that reads it after the uid drop and execs env with it,
     * so no value is on a command line the host's process list shows for the task's life
     * (docs/security.md "The task sandbox"). Absent: the values follow env on the command line.
     */
    readonly file?: { readonly host: string; readonly shell: string };
  };
}

/** The argv after `bwrap` for one task; pure, see the module comment for the layout. */
export function bwrapArgs(req: BwrapRequest): string[] {
  const args = [
    '--die-with-parent',
    '--new-session',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    ...(req.network === 'none' ? ['--unshare-net'] : []),
    ...(req.identity === null ? ['--unshare-user'] : []),
    '--hostname',
    'gpu-broker-task',
    ...(req.statusFd === null ? [] : ['--json-status-fd', String(req.statusFd)]),
  ];
  args.push(...systemArgs(req.system));
  const hide = (h: { path: string; kind: 'dir' | 'file' }) =>
    h.kind === 'dir' ? ['--tmpfs', h.path] : ['--ro-bind', '/dev/null', h.path];
  for (const h of outermost(req.hidden)) args.push(...hide(h));
  // The private /tmp first, so that a program pinned under the host's /tmp is bound on top of it.
  // Both tmpfs are 1777 like the host's: bwrap makes them root's 0755, which a task uid cannot write.
  // Sized by the task's limits (`--size`, bubblewrap 0.7 on): past it a write fails with ENOSPC, and
  // what is written counts against the task's memory limit too (tmpfs pages are charged to its cgroup).
  const size = (bytes: number | undefined) => (bytes === undefined ? [] : ['--size', String(bytes)]);
  args.push('--proc', '/proc', '--dev', '/dev', '--perms', '1777', ...size(req.tmpfsBytes?.shm));
  args.push('--tmpfs', '/dev/shm', '--perms', '1777', ...size(req.tmpfsBytes?.tmp), '--tmpfs', '/tmp');
  // Kernel files no task reads, over the fresh /proc and the read-only /sys (MASKED_KERNEL_PATHS).
  for (const m of req.system.masked ?? []) args.push(...hide(m));
  args.push(...ancestorDirs(req.pinned, [...req.system.dirs, ...req.system.links.map(([, path]) => path)]));
  for (const p of req.pinned) args.push('--ro-bind', p, p);
  // A device below a directory /dev does not have (Hygon's /dev/dri/renderD*): bwrap would make that
  // directory root's 0700, which a task uid cannot traverse, so the card could not be opened.
  const deviceDirs = [...new Set(req.devices.map((d) => dirname(d.inside)))]
    .filter((d) => d !== '/dev')
    .sort();
  for (const dir of deviceDirs) args.push('--perms', '0755', '--dir', dir);
  for (const d of req.devices) args.push('--dev-bind', d.host, d.inside);
  args.push('--bind', req.taskDir, SANDBOX_TASK_DIR);
  // Inputs over the writable task dir, read-only: each top-level entry of the inputs dir at
  // /task/<entry>, so the task can neither change nor replace (rename, unlink) what was approved.
  for (const entry of req.inputs?.entries ?? [])
    args.push('--ro-bind', join(req.inputs!.dir, entry), `${SANDBOX_TASK_DIR}/${entry}`);
  // /mnt is not a system dir: made here 0755 so that a task uid can reach the mounts below it.
  if ((req.mounts ?? []).length > 0) args.push('--perms', '0755', '--dir', '/mnt');
  for (const m of req.mounts ?? []) args.push(m.readOnly ? '--ro-bind' : '--bind', m.hostPath, m.inside);
  const binds = [...req.pinned.map((p) => ({ hostPath: p, inside: p })), ...(req.mounts ?? [])];
  for (const h of rehiddenBelow(req.hidden, binds)) args.push(...hide(h));
  if (req.identity !== null && 'native' in req.identity) {
    // The native sandbox joins the task's cgroups, drops to the uid and execs the task with exactly these
    // variables itself.
    for (const file of req.identity.cgroupProcs ?? []) args.push('--cgroup-procs', file);
    args.push('--uid', String(req.identity.uid), '--gid', String(req.identity.gid));
    for (const [name, value] of Object.entries(req.taskEnv?.vars ?? {}))
      if (name !== 'PWD') args.push('--setenv', name, value);
    args.push('--setenv', 'PWD', SANDBOX_TASK_DIR);
  } else if (req.taskEnv !== undefined && req.identity === null) {
    // No setpriv in between: bwrap's exec is the task's, with exactly the task's env.
    const { vars, bwrapEnvNames } = req.taskEnv;
    for (const name of bwrapEnvNames) if (!Object.hasOwn(vars, name)) args.push('--unsetenv', name);
    for (const [name, value] of Object.entries(vars)) args.push('--setenv', name, value);
  }
  const envFile = req.identity !== null && 'setpriv' in req.identity ? req.taskEnv?.file : undefined;
  if (envFile !== undefined) args.push('--ro-bind', envFile.host, TASK_ENV_FILE);
  if (req.seccomp !== undefined) {
    if ('program' in req.seccomp) {
      if (req.identity === null || !('native' in req.identity))
        throw new Error('a seccomp program inline is for the native sandbox; bwrap takes it by descriptor');
      args.push('--seccomp-bpf', req.seccomp.program.toString('hex'));
    } else args.push('--seccomp', String(req.seccomp.fd));
  }
  args.push('--chdir', SANDBOX_TASK_DIR, '--');
  if (req.identity !== null && 'setpriv' in req.identity) {
    const { uid, gid, setpriv } = req.identity;
    args.push(
      setpriv,
      `--reuid=${uid}`,
      `--regid=${gid}`,
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--no-new-privs',
      '--',
    );
    // After the uid drop: env starts with bwrap's fixed environment (never the task's) and execs the
    // task with exactly the task's. `--` ends env's options; every NAME=VALUE then precedes the program (taskEnvProblem).
    // PWD last, as bwrap itself sets it at `--chdir` for the task it execs (the unprivileged path).
    if (envFile !== undefined && req.taskEnv !== undefined)
      args.push(envFile.shell, '-c', readEnvScript(req.taskEnv.envHelper), 'gpu-broker-task');
    else if (req.taskEnv !== undefined)
      args.push(
        req.taskEnv.envHelper,
        '-i',
        '--',
        ...Object.entries(req.taskEnv.vars)
          .filter(([name]) => name !== 'PWD')
          .map(([name, value]) => `${name}=${value}`),
        `PWD=${SANDBOX_TASK_DIR}`,
      );
  }
  args.push(...req.argv);
  return args;
}

/** Where the task's env file is bound inside the sandbox (read once, after the uid drop, by bash). */
export const TASK_ENV_FILE = '/dev/.gpu-broker-task-env';

/**
 * The bash script run as the task's uid behind setpriv: reads the env file's NUL-ended entries and execs
 * `env -i -- NAME=VALUE… argv` (its `"$@"`), so the values are on env's command line only for the instant
 * before env execs the task. A file it cannot read ends the start (126).
 */
function readEnvScript(envHelper: string): string {
  const quoted = `'${envHelper.replace(/'/g, `'\\''`)}'`;
  return `E=(); while IFS= read -r -d '' kv; do E+=("$kv"); done <${TASK_ENV_FILE} || exit 126; exec ${quoted} -i -- "\${E[@]}" "$@"`;
}

/** The env file's bytes: each NAME=VALUE ended by NUL, PWD last (as bwrap sets it at `--chdir`). */
export function taskEnvData(vars: Readonly<Record<string, string>>): Buffer {
  const entries = Object.entries(vars)
    .filter(([name]) => name !== 'PWD')
    .map(([name, value]) => `${name}=${value}\0`);
  return Buffer.from(`${entries.join('')}PWD=${SANDBOX_TASK_DIR}\0`);
}

/**
 * Why the task's argv and env cannot be handed to the sandbox as built by bwrapArgs, or null: a NUL byte
 * would end an argument early (in the `--args` pipe it would start a new bwrap option), and behind
 * `env` a program path containing `=` would be read as one more variable.
 */
export function taskEnvProblem(
  argv: readonly string[],
  vars: Readonly<Record<string, string>>,
  viaEnvHelper: boolean,
): string | null {
  for (const [name, value] of Object.entries(vars))
    if (value.includes('\0')) return `env ${name} contains a NUL byte, which no process environment can hold`;
  if (argv.some((a) => a.includes('\0'))) return 'argv contains a NUL byte, which no command line can hold';
  if (viaEnvHelper && (argv[0] ?? '').includes('='))
    return `argv[0] ${JSON.stringify(argv[0])} contains "=": name the program by a path without one`;
  return null;
}

/** How bwrap is started: a short command line, and its options as NUL-separated data for `--args`. */
export interface BwrapCommandLine {
  /** bwrap's argv: `--args FD -- <command>`. */
  readonly argv: string[];
  /** What bwrap reads from FD: its options, each ended by a NUL. */
  readonly data: Buffer;
}

/**
 * Splits bwrapArgs' output at the `--` after `--chdir`: the options (every host path, the task's env
 * for an unprivileged bwrap) go through the pipe on `fd`, the command stays on the command line (bwrap
 * takes the command only there). Throws on an option holding a NUL byte (taskEnvProblem says why first).
 */
export function bwrapCommandLine(args: readonly string[], fd: number): BwrapCommandLine {
  const chdir = args.indexOf('--chdir');
  if (chdir < 0 || args[chdir + 2] !== '--') throw new Error('bwrap arguments without --chdir DIR --');
  const options = args.slice(0, chdir + 2);
  if (options.some((o) => o.includes('\0'))) throw new Error('a bwrap option contains a NUL byte');
  return {
    argv: ['--args', String(fd), '--', ...args.slice(chdir + 3)],
    data: Buffer.from(options.map((o) => `${o}\0`).join(''), 'utf8'),
  };
}

/** Whether bubblewrap works here, and the tools the sandbox needs. */
export interface BwrapProbe {
  readonly ok: boolean;
  /** The bwrap executable (absolute). */
  readonly bwrap: string | null;
  /** The setpriv executable (absolute), needed when the worker is root. */
  readonly setpriv: string | null;
  /** The env executable (absolute): applies the task's env after setpriv's uid drop. */
  readonly env: string | null;
  /** What was found, or why it does not work, with the fix. */
  readonly detail: string;
}

/**
 * Finds `bwrap`, `env` and, for a root worker, `setpriv` on the fixed HELPER_PATH (never the daemon's
 * PATH; `path` only for tests) and runs a throwaway sandbox with the same namespaces a task gets, with
 * HELPER_ENV as its whole environment. Never throws.
 */
export async function probeBwrap(opts: { path?: string; root: boolean }): Promise<BwrapProbe> {
  const path = opts.path ?? HELPER_PATH;
  const bwrap = findHelper('bwrap', path);
  const setpriv = findHelper('setpriv', path);
  const env = findHelper('env', path);
  const missing = (detail: string): BwrapProbe => ({ ok: false, bwrap, setpriv, env, detail });
  if (bwrap === null)
    return missing(
      `bubblewrap (bwrap) is not installed in ${path}: apt-get install bubblewrap (or dnf install bubblewrap)`,
    );
  if (opts.root && setpriv === null)
    return missing(
      `setpriv is not installed in ${path} (a root worker drops each task to its own uid with it): apt-get install util-linux`,
    );
  if (env === null)
    return missing(
      `env is not installed in ${path} (it sets each task's env inside the sandbox): apt-get install coreutils`,
    );
  // The same start as a task's: options through `--args`, env set by `--setenv`.
  const error = await probeSandbox(bwrap, {
    system: systemMounts(),
    extra: [...(opts.root ? [] : ['--unshare-user']), '--unsetenv', 'LANG'],
  });
  if (error !== null)
    return {
      ok: false,
      bwrap,
      setpriv,
      env,
      detail: `bubblewrap is installed (${bwrap}) but cannot create a sandbox here: ${error}. Unprivileged user namespaces may be off (sysctl kernel.unprivileged_userns_clone=1), or run the worker as root`,
    };
  return {
    ok: true,
    bwrap,
    setpriv,
    env,
    detail: `bubblewrap ${bwrap}${opts.root ? `, setpriv ${setpriv}` : ''}`,
  };
}

/**
 * Starts a throwaway sandbox with a task's namespaces, `/proc`, `/dev` and `/tmp` and `extra` options, that
 * runs `/bin/true`: `sandbox` is bwrap or the native one (native.ts), its options through the pipe on
 * fd 0, HELPER_ENV its whole environment, 10 s at most. Null when it exited 0, else what went wrong (its
 * message and stderr). Never throws.
 */
export async function probeSandbox(
  sandbox: string,
  probe: { readonly system: SystemMounts; readonly extra: readonly string[] },
): Promise<string | null> {
  const options = [
    '--die-with-parent',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-net',
    ...systemArgs(probe.system),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--tmpfs',
    '/tmp',
    ...probe.extra,
    '--setenv',
    'GPU_BROKER_PROBE',
    '1',
    '--chdir',
    '/',
    '--',
    '/bin/true',
  ];
  const line = bwrapCommandLine(options, 0);
  return new Promise<string | null>((resolve) => {
    const child = execFile(
      sandbox,
      line.argv,
      { env: { ...HELPER_ENV }, timeout: 10_000 },
      (err, _out, stderr) => {
        resolve(err === null ? null : `${err.message.trim()} ${String(stderr).trim()}`.trim());
      },
    );
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(line.data);
  });
}
