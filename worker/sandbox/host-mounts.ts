import { existsSync, lstatSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * What of the host a bubblewrap sandbox (bwrap.ts) binds or hides: the system tree it recreates
 * read-only (step 1 there), the paths it covers (step 2), the task's own program and pinned files
 * (step 4) and the directories above them. The functions that look at the host live here; bwrap.ts
 * builds the arguments from what they find.
 */

/** Paths every sandbox hides, besides the data dirs and the policy's list. */
export const ALWAYS_HIDDEN = ['/root', '/home'] as const;

/** Host directories bound read-only into every sandbox (those that exist). */
export const SYSTEM_DIRS = ['/usr', '/etc', '/opt', '/var', '/sys'] as const;
/** Top-level names that are links into /usr on merged-/usr hosts and directories elsewhere. */
export const SYSTEM_LINKS_OR_DIRS = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'] as const;

/**
 * Kernel files and directories no task reads (docs/security.md "The task sandbox"), each covered (an empty tmpfs, or
 * /dev/null) after the task's fresh /proc and the read-only /sys. The container runtimes' masked paths
 * (kcore, keys, timer_list, sched_debug, latency_stats, acpi, scsi, asound, /sys/firmware, powercap's
 * energy counters), and our own: /proc/key-users (which uids hold kernel keys, and how many),
 * /sys/fs/cgroup (the host's cgroup tree: every other task's execution id, memory and processes), and
 * the host's virtual block devices and ext4 file systems (/sys/devices/virtual/block, /sys/fs/ext4): each
 * task dir is a loop device (task-fs.ts) whose `loop/backing_file` names every other task's
 * `<executions>/<id>/task.img`, and whose ext4 counters show how much each other task writes.
 */
export const MASKED_KERNEL_PATHS = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/diskstats',
  '/proc/kcore',
  '/proc/key-users',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/partitions',
  '/proc/sched_debug',
  '/proc/scsi',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/sys/devices/virtual/block',
  '/sys/devices/virtual/powercap',
  '/sys/firmware',
  '/sys/fs/cgroup',
  '/sys/fs/ext4',
] as const;

/** The host's system tree as the sandbox recreates it. */
export interface SystemMounts {
  /** Directories to bind read-only at the same path. */
  readonly dirs: readonly string[];
  /** Links to recreate: `[target, path]`, e.g. `['usr/bin', '/bin']`. */
  readonly links: ReadonlyArray<readonly [string, string]>;
  /** MASKED_KERNEL_PATHS that this host's kernel has, with their kind; absent: none covered. */
  readonly masked?: ReadonlyArray<{ readonly path: string; readonly kind: 'dir' | 'file' }>;
}

/** Looks at this host's top-level system directories; see SYSTEM_DIRS. */
export function systemMounts(): SystemMounts {
  const dirs: string[] = [];
  const links: Array<[string, string]> = [];
  for (const path of [...SYSTEM_LINKS_OR_DIRS, ...SYSTEM_DIRS]) {
    try {
      const st = lstatSync(path);
      if (st.isSymbolicLink()) links.push([readlinkSync(path), path]);
      else if (st.isDirectory()) dirs.push(path);
    } catch {
      // not on this host
    }
  }
  return { dirs, links, masked: hiddenMounts(MASKED_KERNEL_PATHS) };
}

/** `--symlink` and `--ro-bind` arguments that recreate the host's system tree. */
export function systemArgs(system: SystemMounts): string[] {
  const args: string[] = [];
  for (const [target, path] of system.links) args.push('--symlink', target, path);
  for (const dir of system.dirs) args.push('--ro-bind', dir, dir);
  return args;
}

/**
 * `--perms 0755 --dir` for each ancestor of a pinned path that the sandbox does not already have, parents
 * first: bwrap makes missing mount points 0700 and root-owned, which a task running as its own uid cannot
 * traverse, so a script pinned at /srv/models/run.py would be there and unreachable. Ancestors inside
 * `mounted` (the read-only system dirs and links) exist with the host's modes and are left alone; the
 * sandbox's fresh /tmp exists too, but what is below it must be made.
 */
export function ancestorDirs(pinned: readonly string[], mounted: readonly string[]): string[] {
  const exists = (dir: string) => dir === '/tmp' || mounted.some((m) => dir === m || dir.startsWith(`${m}/`));
  const dirs = new Set<string>();
  for (const path of pinned) {
    for (let dir = dirname(path); dir !== '/' && !exists(dir); dir = dirname(dir)) dirs.add(dir);
  }
  return [...dirs]
    .sort((a, b) => a.split('/').length - b.split('/').length || a.localeCompare(b))
    .flatMap((d) => ['--perms', '0755', '--dir', d]);
}

/**
 * The paths a sandbox hides, each as the host resolves it (its canonical path), with their kind, skipping
 * those that do not exist (bwrap cannot cover a missing path, and there is nothing to hide). Resolved
 * because a hidden path is the operator's text: one named through a symbolic link (`/data/gb` where
 * `/data -> /var/lib/data`) or with `..` would otherwise be covered at a path the sandbox does not show
 * while the directory itself shows under a system dir or a mount (`rehiddenBelow` compares paths).
 * Those under another hidden directory are kept: bwrapArgs covers only the outermost, and hides the
 * others again where a bind shows them (`rehiddenBelow`).
 */
export function hiddenMounts(paths: readonly string[]): Array<{ path: string; kind: 'dir' | 'file' }> {
  const out = new Map<string, 'dir' | 'file'>();
  for (const given of paths) {
    if (!given.startsWith('/') || given === '/') continue;
    let path: string;
    try {
      path = realpathSync(given);
      if (path === '/') continue;
      out.set(path, statSync(path).isDirectory() ? 'dir' : 'file');
    } catch {
      // not on this host
    }
  }
  return [...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([path, kind]) => ({ path, kind }));
}

/** The entries not below another entry of the list (sorted by path; pure). */
export function outermost<T extends { readonly path: string }>(entries: readonly T[]): T[] {
  const sorted = [...entries].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const out: T[] = [];
  for (const e of sorted)
    if (!out.some((o) => o.path === e.path || e.path.startsWith(`${o.path}/`))) out.push(e);
  return out;
}

/** A host path bound into the sandbox at `inside` (a pinned dir at its own path, a mount at /mnt/<name>). */
export interface HostBind {
  readonly hostPath: string;
  readonly inside: string;
}

/**
 * Where each hidden path strictly below a bind shows in the sandbox (docs/security.md "The task sandbox"): a pinned program
 * directory or a named mount is bound after the hidden paths were covered, so a hidden path below it (the
 * worker's data dir under a pinned project dir, a policy secret under a mount) would show again. Each is
 * covered again at its path inside, after the binds; pure, `path` becomes the path inside.
 */
export function rehiddenBelow<T extends { readonly path: string }>(
  hidden: readonly T[],
  binds: readonly HostBind[],
): T[] {
  const out: T[] = [];
  for (const b of binds)
    for (const h of hidden)
      if (b.hostPath !== '/' && h.path.startsWith(`${b.hostPath}/`))
        out.push({ ...h, path: b.inside + h.path.slice(b.hostPath.length) });
  return outermost(out);
}

/**
 * What of the task's own program to bind read-only: its executable (argv[0], which the policy allowed by
 * path) and the directory of every pinned file (an interpreter's script may import its siblings). Paths
 * that do not exist are left out: the task then fails to start, as it would on the host.
 */
export function programBinds(argv0: string | undefined, pinned: readonly string[]): string[] {
  const out = new Set<string>();
  if (argv0?.startsWith('/') && existsSync(argv0)) out.add(argv0);
  for (const file of pinned) {
    const dir = dirname(file);
    if (dir !== '/' && existsSync(dir)) out.add(dir);
  }
  return [...out].sort();
}
