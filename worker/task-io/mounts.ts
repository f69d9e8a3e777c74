import { lstatSync } from 'node:fs';
import { lstat, realpath } from 'node:fs/promises';
import { dirname, normalize } from 'node:path';

/**
 * Named data mounts a worker offers (ADR 0012): its operator declares `--mount NAME=PATH[:rw]`; a spec
 * asks for names (`mounts: ["imagenet-val"]`); the master places the task only on a worker offering all
 * of them; the sandbox binds exactly those at `/mnt/<name>`, read-only unless the operator said `:rw`.
 * Data sets are never uploaded; the host path never leaves the worker.
 *
 * A mount binds exactly the path the operator declared (docs/security.md "The task sandbox"). A task may write a `:rw`
 * mount, so it could plant a symbolic link there for a later task of another owner to be given instead
 * (`models -> /run`, `out -> /tmp`). So, when the worker starts (`declaredMountsProblem`): each path is
 * canonical (no `..`, no symbolic link on the way: it resolves to itself), no mount lies inside (or is)
 * a writable one, none lies inside a path the worker hides (its data dir, token file, `--hide`), and no
 * writable mount holds one. Every task start checks again that each path still resolves to itself
 * (`mountsAsDeclared`), and the policy's `hidden_paths` likewise (`resolveMounts`). Since no mount lies
 * inside a writable one and tasks write nothing else of the host, no task can change what a declared path
 * resolves to between that check and the bind. A hidden path below a read-only mount is hidden again
 * under `/mnt/<name>` (sandbox/bwrap.ts `rehiddenBelow`).
 */

/** One declared mount. */
export interface DataMount {
  readonly name: string;
  readonly host_path: string;
  readonly read_only: boolean;
}

const NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** Parses `NAME=/abs/path` or `NAME=/abs/path:rw` (`:ro` is the default); throws saying what is accepted. */
export function parseMount(text: string): DataMount {
  const m = /^([^=]+)=(\/.*?)(?::(ro|rw))?$/.exec(text);
  if (!m || !NAME.test(m[1]!))
    throw new Error(
      `--mount ${JSON.stringify(text)}: expected NAME=/absolute/path[:ro|:rw], NAME lowercase like "imagenet-val"`,
    );
  return { name: m[1]!, host_path: m[2]!, read_only: m[3] !== 'rw' };
}

/** Where a mount appears inside the sandbox. */
export function mountPointOf(name: string): string {
  return `/mnt/${name}`;
}

/** A mount the spec asked for, as bound into its sandbox. */
export interface ResolvedMount {
  readonly name: string;
  readonly hostPath: string;
  readonly inside: string;
  readonly readOnly: boolean;
}

/**
 * The mounts a spec asks for (`wanted`), as this worker's operator declared them (`offered`), or why the
 * task cannot have them: a name this worker does not offer, any mount without the sandbox, or a mount
 * the policy's `hidden_paths` (`hidden`) would reach into (one inside a hidden path, or a writable one
 * holding one; a read-only one holding one has it hidden again below its mount point).
 */
export function resolveMounts(
  wanted: readonly string[],
  offered: readonly DataMount[],
  sandboxed: boolean,
  hidden: readonly string[] = [],
): ResolvedMount[] | string {
  const mounts: ResolvedMount[] = [];
  for (const name of wanted) {
    const m = offered.find((x) => x.name === name);
    if (m === undefined) return `mount ${JSON.stringify(name)} is not offered by this worker`;
    if (!sandboxed)
      return `mount ${JSON.stringify(name)} needs the sandbox; this worker runs with --isolation none`;
    const reach = hiddenReach(m, hidden, "the policy's hidden path");
    if (reach !== null) return reach;
    mounts.push({ name, hostPath: m.host_path, inside: mountPointOf(name), readOnly: m.read_only });
  }
  return mounts;
}

/** Whether `path` is `dir` or lies below it (both canonical absolute paths). */
export function within(path: string, dir: string): boolean {
  return path === dir || dir === '/' || path.startsWith(`${dir}/`);
}

/** Why `m` would reach into one of `hidden` (named `what`), or null. */
function hiddenReach(m: DataMount, hidden: readonly string[], what: string): string | null {
  for (const h of hidden) {
    if (within(m.host_path, h))
      return `mount ${JSON.stringify(m.name)} (${m.host_path}) lies inside ${what} ${h}`;
    if (!m.read_only && within(h, m.host_path))
      return `writable mount ${JSON.stringify(m.name)} (${m.host_path}) holds ${what} ${h}: a task could rename or replace it; mount a directory that holds none`;
  }
  return null;
}

/**
 * Why the declared mounts cannot be offered as declared, or null (pure; the worker's start refuses on
 * it): a name twice, a path that is not canonical (`..`, `.`, `//`, a trailing `/`) or is `/`, a mount
 * inside (or equal to) a writable one, or one reaching into a path the worker hides (`hidden`: its data
 * dir, token file and `--hide` paths).
 */
export function declaredMountsProblem(
  mounts: readonly DataMount[],
  hidden: readonly string[],
): string | null {
  const names = new Set<string>();
  for (const m of mounts) {
    if (names.has(m.name)) return `--mount ${m.name} is declared twice`;
    names.add(m.name);
    if (m.host_path === '/' || normalize(m.host_path) !== m.host_path || m.host_path.endsWith('/'))
      return `--mount ${m.name}=${m.host_path}: give the directory's canonical absolute path (not /, no "..", ".", "//" or trailing "/")`;
  }
  for (const m of mounts)
    for (const w of mounts)
      if (w !== m && !w.read_only && within(m.host_path, w.host_path))
        return `--mount ${m.name}=${m.host_path} lies inside the writable mount ${w.name}=${w.host_path}: a task writing ${w.name} could plant a symbolic link or replace what ${m.name} names; declare mounts that do not nest in a writable one`;
  for (const m of mounts) {
    const reach = hiddenReach(m, hidden, 'the hidden path');
    if (reach !== null) return `--${reach}`;
  }
  return null;
}

/**
 * Why a declared mount no longer binds exactly its declared path, or null: the path is gone, or resolves
 * elsewhere (a symbolic link on the way). Checked when the worker starts and before each task's bind.
 */
export async function mountsAsDeclared(
  mounts: ReadonlyArray<{ name?: string; hostPath: string }>,
): Promise<string | null> {
  for (const m of mounts) {
    const label = m.name === undefined ? m.hostPath : `${m.name} (${m.hostPath})`;
    let resolved: string;
    try {
      resolved = await realpath(m.hostPath);
      const st = await lstat(resolved);
      if (!st.isDirectory() && !st.isFile()) return `mount ${label} is neither a directory nor a file`;
    } catch (err) {
      return `mount ${label} cannot be reached: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
    }
    if (resolved !== m.hostPath)
      return `mount ${label} resolves to ${resolved} (a symbolic link on the way): a mount binds exactly the path its operator declared`;
    let other: string | null;
    try {
      other = writableByOthers(m.hostPath);
    } catch (err) {
      return `mount ${label} cannot be reached: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
    }
    if (other !== null)
      return `mount ${label} could be swapped by another user between the check and the bind: ${other}; declare a path whose directories on the way only root (or the worker's user) can write`;
  }
  return null;
}

/**
 * Who other than root or this process's user could rename or replace what `path` names (a directory on
 * the way that someone else owns or may write; with `self`, the file itself too: its content), or null.
 * Each task start checks that a mount path resolves to itself (a pinned file: that it has the pinned
 * bytes) and then the sandbox binds it, resolving it again: whoever can write a directory on the way can
 * exchange it for a symbolic link between the two (an atomic RENAME_EXCHANGE), and a task of another
 * owner is given another host directory, or runs other bytes. A sticky directory (/tmp, /var/tmp) is
 * fine where the next entry is root's or the worker's: only its owner may rename it.
 */
export function writableByOthers(path: string, self = false): string | null {
  const me = process.getuid?.() ?? 0;
  const ours = (uid: number) => uid === 0 || uid === me;
  const byOthers = (at: string, st: { uid: number; gid: number; mode: number }): string | null => {
    if (!ours(st.uid)) return `${at} is writable by uid ${st.uid} (its owner)`;
    const byGroup = (st.mode & 0o020) !== 0 && st.gid !== 0;
    const byAll = (st.mode & 0o002) !== 0;
    if (!byGroup && !byAll) return null;
    return `${at} is writable by ${byAll ? 'every user' : `gid ${st.gid}`} (mode ${(st.mode & 0o7777).toString(8)})`;
  };
  if (self) {
    const problem = byOthers(path, lstatSync(path));
    if (problem !== null) return problem;
  }
  for (let child = path, dir = dirname(path); child !== '/'; child = dir, dir = dirname(dir)) {
    const st = lstatSync(dir);
    const problem = byOthers(dir, st);
    if (problem === null) continue;
    if (ours(st.uid) && (st.mode & 0o1000) !== 0 && ours(lstatSync(child).uid)) continue;
    return problem;
  }
  return null;
}
