import { chownSync, mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import {
  ALWAYS_HIDDEN,
  type BwrapProbe,
  bwrapArgs,
  bwrapCommandLine,
  hiddenMounts,
  probeBwrap,
  SYSTEM_DIRS,
  SYSTEM_LINKS_OR_DIRS,
  type SystemMounts,
  systemMounts,
} from '../../../worker/sandbox/bwrap.js';
import { SANDBOX_TASK_DIR } from '../../../worker/task-io/layout.js';
import { BrokerError } from '../../contracts/errors.js';
import { tokenLeakIn } from '../../domain/policy/token-leak.js';
import { runModelProcess } from './model-process.js';
import type { ModelRunner } from './review-agent-loop.js';

/**
 * The agent reviewer's model sandbox (ADR 0041). A model with a shell or file tool,
 * steered by a proposal, must not reach the reviewer token: not in its parent's environment, command
 * line or descriptors, not in the token file, not in a data dir. So `review agent` runs the model
 * command in the bubblewrap sandbox the worker runs tasks in (worker/sandbox/bwrap.ts, same argv
 * builder), with:
 *
 *   - a PID namespace of its own: /proc shows the sandbox's processes only, never the loop's;
 *   - the host's system dirs read-only and nothing else: no /home, /root, /tmp, /srv, /run, no cwd;
 *     the token file, the data dirs and every `gpu-broker*` dir of /etc, /var, /var/lib, /opt,
 *     /usr/local/etc hidden inside them; what the operator binds (`--model-bind`, read-only) may hold
 *     none of those;
 *   - a fresh scratch dir of its own per revision, its cwd and HOME (`/task`), removed afterwards, so
 *     one proposal's model cannot leave notes for the next one's;
 *   - an environment that is an allowlist: a fixed PATH, HOME, TMPDIR and LANG, and the variables the
 *     operator names with `--model-env NAME` (never a GPU_BROKER_* one), taken from the loop's own
 *     environment and handed to bwrap as its environment, never on a command line (`ps` would show it);
 *   - no network (loopback only) unless the operator says `--model-network host` (a real model's CLI
 *     must reach its API);
 *   - a root loop: the model as `nobody` through setpriv, no capabilities, no_new_privs; any other: a
 *     user namespace around the loop's own uid;
 *   - no descriptor of the loop but stdin, stdout and stderr (model-process.ts).
 */

/** The uid and gid a root loop runs the model as. */
export const MODEL_UID = 65534;
/** The model's PATH: the system directories only. */
export const MODEL_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** Sizes of the sandbox's private /tmp and /dev/shm. */
const TMPFS_BYTES = 512 * 1024 * 1024;
/** Host directories searched for gpu-broker's own dirs (`gpu-broker`, `gpu-broker-worker`, `.gpu-broker`…). */
const WELL_KNOWN_PARENTS = ['/etc', '/var', '/var/lib', '/opt', '/srv', '/usr/local/etc'] as const;
const OURS = /^\.?gpu-broker/;

/** `--model-network`: what the model's sandbox shares of the host's network. */
export type ModelNetwork = 'none' | 'host';

/** Parses `--model-network`. */
export function parseModelNetwork(value: string | undefined): ModelNetwork {
  if (value === undefined || value === 'none') return 'none';
  if (value === 'host') return 'host';
  throw new BrokerError(
    'INVALID_INPUT',
    `--model-network ${JSON.stringify(value)}: expected none or host`,
    'host lets the model reach its API (and anything else this host reaches); none is loopback only.',
  );
}

/**
 * The model's whole environment: the fixed part (PATH, HOME, TMPDIR, LANG) and each `--model-env NAME`
 * with its value in `parent`. INVALID_INPUT for a GPU_BROKER_* name, a malformed one, or one not set.
 */
export function modelEnv(
  parent: Readonly<Record<string, string | undefined>>,
  names: readonly string[],
  home: string,
): Record<string, string> {
  const env: Record<string, string> = { PATH: MODEL_PATH, HOME: home, TMPDIR: '/tmp', LANG: 'C.UTF-8' };
  for (const name of names) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
      throw new BrokerError(
        'INVALID_INPUT',
        `--model-env ${JSON.stringify(name)}: not a variable name`,
        'e.g. --model-env ANTHROPIC_API_KEY',
      );
    if (/^GPU_BROKER_/i.test(name))
      throw new BrokerError(
        'INVALID_INPUT',
        `--model-env ${name}: gpu-broker's own variables never reach the model`,
        'The model answers on stdout; the loop alone talks to the master.',
      );
    const value = parent[name];
    if (value === undefined)
      throw new BrokerError(
        'INVALID_INPUT',
        `--model-env ${name}: not set in this environment`,
        `export ${name}=… first`,
      );
    // A careless operator's `--model-env MY_TOKEN` holding a gpu-broker token under another name.
    if (tokenLeakIn(value) !== null)
      throw new BrokerError(
        'INVALID_INPUT',
        `--model-env ${name}: its value holds a gpu-broker token`,
        'The model must never see a gpu-broker token; pass only what its own CLI needs (an API key).',
      );
    env[name] = value;
  }
  return env;
}

/**
 * The host paths that may hold a gpu-broker secret, whether or not they exist: the token file (as given
 * and as resolved), the data dirs the CLI would use (GPU_BROKER_HOME, ./.gpu-broker, ./.gpu-broker-worker,
 * ~/.gpu-broker, ~/.config/gpu-broker) and every `gpu-broker*` entry of the well-known parents.
 */
export function secretPaths(input: {
  tokenFile: string | undefined;
  cwd: string;
  env: Readonly<Record<string, string | undefined>>;
}): string[] {
  const paths: string[] = [];
  if (input.tokenFile) {
    const file = resolve(input.cwd, input.tokenFile);
    paths.push(file);
    // Its dir too: `gpu-broker start` writes the operator's and the agent's tokens beside the
    // reviewer's (and a data dir holds the database), so hiding the one file left its siblings in
    // view wherever the dir lies inside a system dir (/var/tmp, /opt/…). Unless the dir is one the
    // sandbox cannot do without (a system dir, /usr/*) — then the file alone is hidden.
    const dir = dirname(file);
    if (!tooBroadToHide(dir)) paths.push(dir);
  }
  const dataHome = input.env['GPU_BROKER_HOME'];
  if (dataHome) paths.push(resolve(input.cwd, dataHome));
  paths.push(join(input.cwd, '.gpu-broker'), join(input.cwd, '.gpu-broker-worker'));
  const home = input.env['HOME'];
  if (home && isAbsolute(home)) paths.push(join(home, '.gpu-broker'), join(home, '.config', 'gpu-broker'));
  for (const parent of WELL_KNOWN_PARENTS) {
    let names: string[] = [];
    try {
      names = readdirSync(parent);
    } catch {
      // not on this host
    }
    for (const name of names) if (OURS.test(name)) paths.push(join(parent, name));
  }
  // A path reached through a link is hidden (and checked against binds) where it really is, too.
  for (const p of [...paths])
    try {
      const real = realpathSync(p);
      if (real !== p) paths.push(real);
    } catch {
      // does not exist
    }
  return [...new Set(paths)].sort();
}

/** A dir hiding which would break the sandbox: `/`, a system dir or a parent of one, a direct child of /usr. */
function tooBroadToHide(dir: string): boolean {
  const needed = [...SYSTEM_DIRS, ...SYSTEM_LINKS_OR_DIRS, ...WELL_KNOWN_PARENTS];
  return needed.some((d) => within(d, dir)) || dirname(dir) === '/usr';
}

const within = (path: string, dir: string) => path === dir || path.startsWith(dir === '/' ? '/' : `${dir}/`);

/**
 * `--model-bind` paths as they really are, each checked: absolute, existing, holding no secret path and
 * inside none, and not a home dir (/root, /home, $HOME) or anything above one. INVALID_INPUT otherwise.
 */
export function checkedBinds(
  binds: readonly string[],
  secrets: readonly string[],
  home: string | undefined,
): string[] {
  const homes = [...ALWAYS_HIDDEN, ...(home && isAbsolute(home) ? [home] : [])];
  return binds.map((bind) => {
    const refuse = (why: string) =>
      new BrokerError(
        'INVALID_INPUT',
        `--model-bind ${JSON.stringify(bind)}: ${why}`,
        'Bind only what the model command needs to run (its program, a kit dir), read-only.',
      );
    if (!isAbsolute(bind)) throw refuse('not an absolute path');
    let real: string;
    try {
      real = realpathSync(bind);
    } catch {
      throw refuse('does not exist');
    }
    const secret = secrets.find((s) => within(s, real) || within(real, s));
    if (secret !== undefined) throw refuse(`it would show ${secret}, which may hold a gpu-broker token`);
    const above = homes.find((h) => within(h, real));
    if (above !== undefined) throw refuse(`it would show the home dir ${above}; bind a folder inside it`);
    return real;
  });
}

/** What one model run's sandbox is made of. */
export interface ModelSandboxRequest {
  readonly system: SystemMounts;
  /** Host paths to hide where they are visible (inside the system dirs); see secretPaths. */
  readonly secrets: readonly string[];
  /** checkedBinds' answer. */
  readonly binds: readonly string[];
  readonly network: ModelNetwork;
  /** The setpriv executable when the loop is root (the model runs as MODEL_UID); null otherwise. */
  readonly setpriv: string | null;
  /** The host scratch dir bound at /task. */
  readonly scratch: string;
  readonly command: string;
}

/**
 * bwrap's argv for one model run; pure but for looking at which hidden paths exist (hiddenMounts) and
 * where /etc/resolv.conf points (a host-network model needs its resolver).
 */
export function modelSandboxArgs(req: ModelSandboxRequest): string[] {
  const visible = (p: string) => req.system.dirs.some((d) => within(p, d));
  const pinned = [...req.binds];
  if (req.network === 'host') pinned.push(...resolverFile(req.system));
  return bwrapArgs({
    system: req.system,
    taskDir: req.scratch,
    hidden: hiddenMounts([...ALWAYS_HIDDEN, ...req.secrets.filter(visible)]),
    pinned: [...new Set(pinned)].sort(),
    devices: [],
    network: req.network,
    identity: req.setpriv === null ? null : { uid: MODEL_UID, gid: MODEL_UID, setpriv: req.setpriv },
    statusFd: null,
    argv: ['/bin/sh', '-c', req.command],
    tmpfsBytes: { tmp: TMPFS_BYTES, shm: TMPFS_BYTES },
  });
}

/** /etc/resolv.conf's real file when it lies outside the system dirs (systemd-resolved's, under /run). */
function resolverFile(system: SystemMounts): string[] {
  try {
    const real = realpathSync('/etc/resolv.conf');
    return system.dirs.some((d) => within(real, d)) ? [] : [real];
  } catch {
    return [];
  }
}

/** Everything sandboxedModel needs. */
export interface ModelSandboxOptions {
  readonly command: string;
  readonly timeoutMs: number;
  readonly network: ModelNetwork;
  /** `--model-bind` as given. */
  readonly binds: readonly string[];
  /** `--model-env` names. */
  readonly envNames: readonly string[];
  /** The loop's environment and cwd, and its token file (flag or GPU_BROKER_TOKEN_FILE). */
  readonly parentEnv: Readonly<Record<string, string | undefined>>;
  readonly cwd: string;
  readonly tokenFile: string | undefined;
  /** Whether the loop runs as root. */
  readonly root: boolean;
  /** Where bwrap and setpriv are looked for (tests only; default the worker's HELPER_PATH). */
  readonly helperPath?: string;
}

/**
 * A ModelRunner that runs each model command in its own sandbox. Checks everything first, so a bad
 * flag or a missing sandbox stops the loop before it reads the queue: INVALID_INPUT for the flags,
 * UNAVAILABLE (naming what to install) when bubblewrap is missing or cannot make a sandbox here.
 */
export async function sandboxedModel(opts: ModelSandboxOptions): Promise<ModelRunner> {
  const env = modelEnv(opts.parentEnv, opts.envNames, SANDBOX_TASK_DIR);
  const secrets = secretPaths({ tokenFile: opts.tokenFile, cwd: opts.cwd, env: opts.parentEnv });
  const binds = checkedBinds(opts.binds, secrets, opts.parentEnv['HOME']);
  const probe: BwrapProbe = await probeBwrap({
    root: opts.root,
    ...(opts.helperPath ? { path: opts.helperPath } : {}),
  });
  if (!probe.ok || probe.bwrap === null)
    throw new BrokerError(
      'UNAVAILABLE',
      `the model cannot be sandboxed here: ${probe.detail}`,
      'Install bubblewrap (apt-get install bubblewrap), or pass --unsandboxed-model to run the model as yourself, where a model with tools can read your token (docs/security.md "Agent reviewers").',
    );
  const bwrap = probe.bwrap;
  const system = systemMounts();
  return async (prompt) => {
    const scratch = mkdtempSync(join(tmpdir(), 'gpu-broker-model-'));
    try {
      if (opts.root) chownSync(scratch, MODEL_UID, MODEL_UID);
      const args = modelSandboxArgs({
        system,
        secrets,
        binds,
        network: opts.network,
        setpriv: opts.root ? probe.setpriv : null,
        scratch,
        command: opts.command,
      });
      const line = bwrapCommandLine(args, 3);
      return await runModelProcess(
        { file: bwrap, args: line.argv, env, cwd: scratch, fd3: line.data, timeoutMs: opts.timeoutMs },
        prompt,
      );
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  };
}

/**
 * A ModelRunner for `--unsandboxed-model`: `/bin/sh -c COMMAND` as the loop's own user, which a model
 * with tools can turn against the reviewer token (the loop warns). What still holds: the allowlisted
 * environment, a fresh scratch dir as cwd and HOME per run, no inherited descriptor.
 */
export function unsandboxedModel(
  opts: Pick<ModelSandboxOptions, 'command' | 'timeoutMs' | 'envNames' | 'parentEnv'>,
): ModelRunner {
  modelEnv(opts.parentEnv, opts.envNames, '/');
  return async (prompt) => {
    const scratch = mkdtempSync(join(tmpdir(), 'gpu-broker-model-'));
    try {
      const env = modelEnv(opts.parentEnv, opts.envNames, scratch);
      return await runModelProcess(
        { file: '/bin/sh', args: ['-c', opts.command], env, cwd: scratch, timeoutMs: opts.timeoutMs },
        prompt,
      );
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  };
}
