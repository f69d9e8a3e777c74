import { spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { HELPER_PATH } from '../../../worker/sandbox/helper-commands.js';

/**
 * What `npm start` sets up on the host before `gpu-broker start` (ADR 0025): on a fresh Debian
 * machine `npm install && npm start` ran, but nothing useful could run — no bubblewrap (so the local
 * worker ran UNISOLATED and the starter config allowed only the pinned workload) and no python3 or torch.
 * As `npm test` does for its packages (scripts/ensure-test-deps.sh), it installs what is missing with apt
 * when it runs as root, and otherwise prints the exact command. It never fails `npm start`.
 *
 * Decided as data (decideHostSetup, pure), applied by one function (runHostSetup). python3-torch is large
 * (about 1 GB with its libraries, CPU-only on Debian: real cards need a CUDA or ROCm build anyway), so it
 * is installed only when asked for (GPU_BROKER_SETUP_TORCH=1); otherwise the command is printed.
 */

/** What the host has and allows, as probed (probeHost) or as a test states it. */
export interface HostFacts {
  /** `bwrap` on PATH and where the worker looks for it (HELPER_PATH). */
  bwrap: boolean;
  /** `/usr/bin/python3`, the interpreter the starter config allows. */
  python3: boolean;
  /** `/usr/bin/python3` finds the torch module. */
  torch: boolean;
  root: boolean;
  /** `apt-get` on PATH. */
  apt: boolean;
  /** GPU_BROKER_NO_SETUP=1: install nothing, say what is missing. */
  skip: boolean;
  /** GPU_BROKER_SETUP_TORCH=1: install python3-torch too. */
  withTorch: boolean;
}

/** One package `npm start` wants: when it is missing, whether it is installed without being asked. */
interface Wanted {
  pkg: string;
  has: (f: HostFacts) => boolean;
  install: (f: HostFacts) => boolean;
}

/** The packages, in the order they are named and installed. */
const WANTED: readonly Wanted[] = [
  { pkg: 'bubblewrap', has: (f) => f.bwrap, install: () => true },
  { pkg: 'python3', has: (f) => f.python3, install: () => true },
  { pkg: 'python3-torch', has: (f) => f.torch, install: (f) => f.withTorch },
];

/**
 * What to do:
 * - `install`: run apt-get for `packages` (root, apt-get present, not skipped);
 * - `advise`: print `command` for `packages` (`why`: skipped, not root, or no apt-get);
 * and, in both, `optional`: missing packages not installed unless asked for (python3-torch).
 */
export type HostSetupPlan =
  | { kind: 'nothing'; optional: string[] }
  | { kind: 'install'; packages: string[]; optional: string[] }
  | { kind: 'advise'; packages: string[]; optional: string[]; why: 'skipped' | 'not-root' | 'no-apt' };

/** Decides what `npm start` installs or advises (pure). */
export function decideHostSetup(f: HostFacts): HostSetupPlan {
  const missing = WANTED.filter((w) => !w.has(f));
  const packages = missing.filter((w) => w.install(f)).map((w) => w.pkg);
  const optional = missing.filter((w) => !w.install(f)).map((w) => w.pkg);
  if (packages.length === 0) return { kind: 'nothing', optional };
  if (f.skip) return { kind: 'advise', packages, optional, why: 'skipped' };
  if (!f.root) return { kind: 'advise', packages, optional, why: 'not-root' };
  if (!f.apt) return { kind: 'advise', packages, optional, why: 'no-apt' };
  return { kind: 'install', packages, optional };
}

/** The command that installs `packages` here: with sudo unless root. */
export function installCommand(packages: readonly string[], root: boolean): string {
  return `${root ? '' : 'sudo '}apt-get install -y ${packages.join(' ')}`;
}

const PREFIX = 'npm start setup:';

/** What each missing package costs a new user, in the words of the lines below. */
const WHAT_FOR: Record<string, string> = {
  bubblewrap: 'tasks run UNISOLATED and only the pinned workload may run',
  python3: 'the starter config allows /usr/bin/python3, which is not there',
  'python3-torch': 'tasks that import torch fail',
};

/** The line printed before installing, or instead of installing: what is missing, why it matters, how. */
export function planLines(plan: HostSetupPlan, root: boolean): string[] {
  if (plan.kind === 'install')
    return [
      `${PREFIX} installing ${plan.packages.join(' ')} with apt-get (GPU_BROKER_NO_SETUP=1 skips this)…`,
    ];
  if (plan.kind === 'nothing') return [];
  const how =
    plan.why === 'no-apt'
      ? `no apt-get here: install ${plan.packages.join(' ')} with your package manager`
      : `run: ${installCommand(plan.packages, root)}`;
  const skipped = plan.why === 'skipped' ? 'GPU_BROKER_NO_SETUP=1, nothing installed; ' : '';
  return [`${PREFIX} ${skipped}missing ${without(plan.packages)}; ${how}`];
}

/** The line about what was left out unless asked for (python3-torch), printed last. */
export function optionalLines(plan: HostSetupPlan, root: boolean): string[] {
  if (plan.optional.length === 0) return [];
  const how = root ? 'GPU_BROKER_SETUP_TORCH=1 npm start' : installCommand(plan.optional, root);
  return [`${PREFIX} not installed: ${without(plan.optional)}; it is large (about 1 GB): ${how} installs it`];
}

function without(pkgs: readonly string[]): string {
  return pkgs.map((p) => `${p} (without it ${WHAT_FOR[p]})`).join('; ');
}

/** Whether `name` is an executable file in one of PATH's directories. */
function onPath(name: string, path: string | undefined): boolean {
  return (path ?? '').split(delimiter).some((dir) => {
    if (dir === '') return false;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** Probes this host. The torch check finds the module without importing it (importing takes seconds). */
export function probeHost(env: Record<string, string | undefined>): HostFacts {
  const python3 = (() => {
    try {
      accessSync('/usr/bin/python3', constants.X_OK);
      return true;
    } catch {
      return false;
    }
  })();
  const findTorch = 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)';
  return {
    // The worker runs helpers only from HELPER_PATH (docs/security.md "Code the reviewer did not read"): a bwrap found only elsewhere on PATH
    // (/opt/bin) is one the worker would not use, so it counts as missing.
    bwrap: onPath('bwrap', env['PATH']) && onPath('bwrap', HELPER_PATH),
    python3,
    torch: python3 && spawnSync('/usr/bin/python3', ['-c', findTorch], { stdio: 'ignore' }).status === 0,
    root: process.getuid?.() === 0,
    apt: onPath('apt-get', env['PATH']),
    skip: env['GPU_BROKER_NO_SETUP'] === '1',
    withTorch: env['GPU_BROKER_SETUP_TORCH'] === '1',
  };
}

/** Runs apt-get (found on `env.PATH`); null when it worked, else the reason in one line. */
function aptGet(args: string[], env: Record<string, string | undefined>): string | null {
  const r = spawnSync('apt-get', args, {
    env: { ...env, DEBIAN_FRONTEND: 'noninteractive' },
    encoding: 'utf8',
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  if (r.error) return r.error.message;
  if (r.status === 0) return null;
  const last = (r.stderr ?? '').trim().split('\n').pop() ?? '';
  return `apt-get ${args[0]} exited ${r.status ?? r.signal}${last ? `: ${last}` : ''}`;
}

/** Decides, says what it does, installs when the plan says so, and says how it went. Never throws. */
export function runHostSetup(
  facts: HostFacts,
  env: Record<string, string | undefined>,
  print: (line: string) => void,
): HostSetupPlan {
  const plan = decideHostSetup(facts);
  for (const line of planLines(plan, facts.root)) print(line);
  if (plan.kind === 'install') {
    const failed =
      aptGet(['update', '-qq'], env) ??
      aptGet(['install', '-y', '-qq', '--no-install-recommends', ...plan.packages], env);
    print(
      failed === null
        ? `${PREFIX} installed ${plan.packages.join(' ')}`
        : `${PREFIX} could not install (${failed}); run: ${installCommand(plan.packages, true)} — starting anyway`,
    );
  }
  for (const line of optionalLines(plan, facts.root)) print(line);
  return plan;
}
