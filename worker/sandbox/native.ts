import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { probeSandbox, type SystemMounts } from './bwrap.js';

/**
 * The native per-task sandbox (ADR 0038): `gpu-broker-sandbox`, built from native/gpu-broker-sandbox.c by
 * `npm run build` (scripts/build-native.sh) into dist/native/. It takes the options bwrapArgs makes for a
 * root worker, in bwrap's syntax, and does setpriv's uid drop and env's exact environment itself, so one
 * static program replaces bwrap + setpriv + env (a task's start costs about a third of that chain's CPU on
 * the CI host). Only a root worker uses it; an unprivileged worker's bwrap runs in a user namespace.
 *
 *   auto    the native sandbox when it is built, safe to run as root and works here; else bwrap.
 *   bwrap   bwrap + setpriv + env, as before.
 *   native  the native sandbox, or the worker does not start (and says why).
 */

/** What `--sandbox-engine` accepts. */
export type SandboxEngineChoice = 'auto' | 'bwrap' | 'native';

/** Parses `--sandbox-engine`; throws for anything else. */
export function parseSandboxEngine(text: string): SandboxEngineChoice {
  if (text === 'auto' || text === 'bwrap' || text === 'native') return text;
  throw new Error(`--sandbox-engine ${JSON.stringify(text)}: expected auto, bwrap or native`);
}

/** Where `npm run build` puts the native sandbox: dist/native/ of this package, from source or from dist. */
export function nativeSandboxPath(): string {
  // From dist/worker/sandbox/native.js or worker/sandbox/native.ts: the package root is the first
  // directory above holding package.json.
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json'))) break;
    dir = dirname(dir);
  }
  return join(dir, 'dist', 'native', 'gpu-broker-sandbox');
}

/**
 * Why `path` must not be run as root, or null: it and every directory above it must be owned by root
 * and writable by nobody else, or whoever could replace it would run code as root in every task's start.
 */
export function unsafeToRunAsRoot(path: string): string | null {
  let p = path;
  for (;;) {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(p);
    } catch {
      return `${p} does not exist`;
    }
    if (st.uid !== 0) return `${p} is owned by uid ${st.uid}, not root`;
    // A sticky world-writable dir (/tmp) still lets others add entries but not replace root's.
    const sticky = (st.mode & 0o1000) !== 0;
    if ((st.mode & 0o022) !== 0 && !(st.isDirectory() && sticky))
      return `${p} is writable by group or others (mode ${(st.mode & 0o7777).toString(8)})`;
    const up = dirname(p);
    if (up === p) return null;
    p = up;
  }
}

/** Whether the native sandbox works here. */
export interface NativeProbe {
  /** The executable, when it works. */
  readonly path: string | null;
  /** What was found, or why it cannot be used. */
  readonly detail: string;
}

/**
 * Finds the native sandbox and runs a throwaway task in it with a task's namespaces, as an unprivileged
 * uid; never throws. `path` only for tests.
 */
export async function probeNativeSandbox(opts: {
  root: boolean;
  system: SystemMounts;
  /** The uid (and gid) the throwaway task runs as: the top of the worker's task uid range. */
  uid?: number;
  path?: string;
}): Promise<NativeProbe> {
  const path = opts.path ?? nativeSandboxPath();
  if (!opts.root) return { path: null, detail: 'the native sandbox is for root workers' };
  if (!existsSync(path))
    return {
      path: null,
      detail: `the native sandbox is not built (${path}; npm run build builds it where a C compiler is installed)`,
    };
  const unsafe = unsafeToRunAsRoot(path);
  if (unsafe !== null)
    return { path: null, detail: `the native sandbox is not safe to run as root: ${unsafe}` };
  const id = String(opts.uid ?? 65534);
  const error = await probeSandbox(path, { system: opts.system, extra: ['--uid', id, '--gid', id] });
  if (error !== null)
    return { path: null, detail: `the native sandbox (${path}) does not work here: ${error}` };
  return { path, detail: `the native sandbox ${path}` };
}
