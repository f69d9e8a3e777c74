import { execFile } from 'node:child_process';
import {
  chmod,
  chown,
  mkdir,
  readFile,
  realpath,
  rm,
  rmdir,
  stat,
  statfs,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import { findHelper, HELPER_ENV } from './helper-commands.js';
import { parseMountinfo } from './mountinfo.js';

/**
 * A file system of its own for each sandboxed task's dir (ADR 0043), sized by its `disk_mib`, so
 * the kernel counts every byte the task holds there and refuses the rest: a file opened and unlinked, one
 * made with O_TMPFILE, `fallocate`'d space, a million empty files (inodes) all come out of the same few
 * MiB, and past them the task's writes fail with ENOSPC. A watch that walks the dir (the fallback) sees
 * none of those; it could be outrun by a fast writer, and it let a task with a 256 MiB limit hold 1 GiB
 * of the worker's data file system for its whole life.
 *
 * How: an image file `<execution>/task.img` of the limit plus a margin, its room taken on the data file
 * system when it is made (`fallocate`: the kernel marks the blocks, nothing is written), formatted ext4
 * (no journal, no reserved blocks, inode tables initialised lazily: about 50 ms whatever the size),
 * mounted on the task dir with a loop device (`nosuid,nodev`), its root given to the task's uid. Tasks
 * together never hold more of the data file system than their images (a sparse image that grew as the
 * task wrote let tasks each within its limit fill it together: I/O errors in the others' file systems,
 * the worker's store full); a task whose room is not there fails to start, saying so. The watch reads the file system's
 * own count (statfs) each second and ends the task DISK_LIMIT once it holds more than the limit; the
 * margin lets the watch see it before the kernel refuses. At the end (or at the next start, after a
 * crash: `unmountStale`) the file system is unmounted and the image removed.
 *
 * A worker that is not root, or a host without mkfs.ext4 or loop devices, keeps the watch that walks the
 * dir (its banner says which); so do Slurm ranks. Container tasks get it as process tasks do.
 */

/** The image is the limit plus this share of it, at least MARGIN_MIN_MIB: room for ext4's metadata. */
const MARGIN_SHARE = 0.05;
const MARGIN_MIN_MIB = 16;
/** ext4 with 4 KiB blocks holds files of at most 16 TiB: the image stays below it. */
const MAX_IMAGE_MIB = 16 * 1024 * 1024 - 1;
/** Each helper gets this long before it counts as failed. */
const HELPER_TIMEOUT_MS = 30_000;
const MIB = 1024 * 1024;
/** The image's name beside the execution's task dir. */
export const TASK_IMAGE = 'task.img';

const NO_ROOM = "no room on the worker's data file system";

/**
 * Whether mountTaskFs' `problem` is that the data file system has no room for the image: the task must
 * not start then (SETUP_FAILED). Every other problem leaves it the walk, as a worker without the tools;
 * this one would have it write into the very file system that is full.
 */
export function roomMissing(problem: string): boolean {
  return problem.startsWith(NO_ROOM);
}

/** The programs a per-task file system needs, found once at worker start. */
export interface TaskFsTools {
  readonly mkfs: string;
  /** Takes the image's room on the data file system when it is made (util-linux, as mount). */
  readonly fallocate: string;
  readonly mount: string;
  readonly umount: string;
}

/** One task's mounted file system. */
export interface TaskFs {
  /** How the limit is enforced, for the exit's report. */
  readonly by: string;
  /** Bytes the task holds on it now (the file system's own count, less what a fresh one uses). */
  used(): Promise<number>;
  /** Unmounts it (lazily when something still holds it) and removes the image; never throws. */
  release(): Promise<void>;
}

/** Runs one helper with the fixed helper env; resolves with its stderr on failure, null on success. */
function run(file: string, args: readonly string[]): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { env: { ...HELPER_ENV }, timeout: HELPER_TIMEOUT_MS, maxBuffer: 1024 * 1024 },
      (err, _stdout, stderr) =>
        resolve(err === null ? null : (String(stderr).trim() || err.message).slice(0, 500)),
    );
  });
}

/**
 * The tools, after one real try in `scratchDir` (make, format and mount a small image, then undo it):
 * or why this worker cannot give its tasks a file system of their own (not root, no mkfs.ext4, no loop
 * devices, a kernel that refuses).
 */
export async function probeTaskFs(scratchDir: string, root: boolean): Promise<TaskFsTools | string> {
  if (!root) return 'the worker is not root (mounting needs it)';
  const mkfs = findHelper('mkfs.ext4');
  const mount = findHelper('mount');
  const umount = findHelper('umount');
  const fallocate = findHelper('fallocate');
  if (mkfs === null || mount === null || umount === null || fallocate === null)
    return 'mkfs.ext4, mount, umount or fallocate is not installed (apt-get install e2fsprogs mount util-linux)';
  const tools = { mkfs, fallocate, mount, umount };
  const dir = join(scratchDir, `task-fs-probe-${process.pid}`);
  await rm(dir, { recursive: true, force: true });
  await mkdir(join(dir, 'task'), { recursive: true, mode: 0o700 });
  try {
    const fs = await mountTaskFs(tools, {
      execRoot: dir,
      taskDir: join(dir, 'task'),
      diskMib: 1,
      owner: null,
    });
    if (typeof fs === 'string') return fs;
    await fs.release();
    return tools;
  } finally {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** What mounting one task's file system needs. */
export interface TaskFsRequest {
  /** The execution's dir: the image goes here, beside the task dir. */
  readonly execRoot: string;
  /** The (empty, or holding only its own empty `out`) task dir to mount on. */
  readonly taskDir: string;
  readonly diskMib: number;
  /** Whom the file system's root and its `out` dir belong to (the task's uid), or null: the worker. */
  readonly owner: { readonly uid: number; readonly gid: number } | null;
}

/** Makes, formats and mounts the task's file system on its dir; returns why it could not. */
export async function mountTaskFs(tools: TaskFsTools, req: TaskFsRequest): Promise<TaskFs | string> {
  const image = join(req.execRoot, TASK_IMAGE);
  const sizeMib = Math.min(
    MAX_IMAGE_MIB,
    req.diskMib + Math.max(MARGIN_MIN_MIB, Math.ceil(req.diskMib * MARGIN_SHARE)),
  );
  const undo = async () => {
    await rm(image, { force: true }).catch(() => undefined);
  };
  try {
    const before = await stat(req.taskDir);
    await rm(image, { force: true });
    await writeFile(image, '', { mode: 0o600, flag: 'wx' });
    // The image's room is taken now, not as the task writes (a sparse image would promise room the data
    // file system may not have once several tasks run: together, each within its limit, they would fill
    // it, the worker's store and the other tasks' images with it). No room: the task does not start.
    const room = await run(tools.fallocate, ['-l', String(sizeMib * MIB), image]);
    if (room !== null) {
      await undo();
      return `${NO_ROOM} for the task dir's ${sizeMib} MiB: ${room}`;
    }
    const formatted = await run(tools.mkfs, [
      '-q',
      '-F',
      '-O',
      '^has_journal',
      '-E',
      'lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0',
      '-m',
      '0',
      image,
    ]);
    if (formatted !== null) {
      await undo();
      return `cannot format the task's file system: ${formatted}`;
    }
    // First the task dir bound on itself and made unbindable, the file system then mounted on that: a
    // sandbox binds the host's /var (where data dirs usually are) recursively, and a recursive bind
    // leaves out an unbindable mount with all below it, so no other task's /proc/self/mountinfo lists
    // this one (`<executions>/<id>/task`: its execution id). The task's own bind of its dir takes the
    // file system on top, which stays bindable.
    const mounted =
      (await run(tools.mount, ['--bind', req.taskDir, req.taskDir])) ??
      (await run(tools.mount, ['--make-unbindable', req.taskDir])) ??
      (await run(tools.mount, ['-t', 'ext4', '-o', 'loop,nosuid,nodev', image, req.taskDir]));
    if (mounted !== null) {
      await unmountAt(tools, req.taskDir);
      await undo();
      return `cannot mount the task's file system: ${mounted}`;
    }
    const fs = mountedFs(tools, image, req.taskDir, sizeMib);
    try {
      await rmdir(join(req.taskDir, 'lost+found')).catch(() => undefined);
      const owner = req.owner ?? { uid: before.uid, gid: before.gid };
      await chown(req.taskDir, owner.uid, owner.gid);
      await chmod(req.taskDir, before.mode & 0o7777);
      await mkdir(join(req.taskDir, 'out'), { mode: 0o700 });
      await chown(join(req.taskDir, 'out'), owner.uid, owner.gid);
      await fs.settle();
    } catch (err) {
      await fs.release();
      return `cannot prepare the task's file system: ${(err as Error).message}`;
    }
    return fs;
  } catch (err) {
    await undo();
    return `cannot make the task's file system: ${(err as Error).message}`;
  }
}

interface MountedFs extends TaskFs {
  /** Takes what the fresh file system uses as the zero of `used`. */
  settle(): Promise<void>;
}

function mountedFs(tools: TaskFsTools, image: string, point: string, sizeMib: number): MountedFs {
  let baseline = 0;
  let released: Promise<void> | null = null;
  const usedNow = async () => {
    const s = await statfs(point);
    return (s.blocks - s.bfree) * s.bsize;
  };
  return {
    by: `a file system of its own (ext4 on a loop device, ${sizeMib} MiB) and a watch every second`,
    settle: async () => {
      baseline = await usedNow();
    },
    used: async () => Math.max(0, (await usedNow()) - baseline),
    release: () => {
      released ??= (async () => {
        await unmountAt(tools, point);
        await rm(image, { force: true }).catch(() => undefined);
      })();
      return released;
    },
  };
}

/** Whom the sweep may touch: as sandbox/sweep-stale.ts's SweepDeps. */
export interface StaleTaskFsDeps {
  /** Whether this worker's store has a record of execution `id` (so it made that file system). */
  readonly known: (id: string) => boolean;
  /** The executions running now; read after the mount table, so one that starts meanwhile is never swept. */
  readonly running: () => ReadonlySet<string>;
}

/** Execution ids are safe path segments (master plans, schema-checked); anything else is not ours. */
const SAFE_ID = /^[A-Za-z0-9_-]+$/;

/**
 * Unmounts what mountTaskFs mounted on a task dir: the file system (lazily when something still holds
 * it), then the unbindable bind under it. Where less is mounted, the rest fails as "not mounted".
 */
async function unmountAt(tools: TaskFsTools, point: string): Promise<void> {
  for (let i = 0; i < 2; i++)
    if ((await run(tools.umount, [point])) !== null) await run(tools.umount, ['-l', point]);
}

/**
 * Unmounts the file system mounted on `<executionsDir>/<id>/task` of each execution this worker knows
 * and that is not running now (what a worker killed mid-task left mounted) and removes the image beside
 * it; returns the task dirs it unmounted. The sweep runs once recovery is over, while the worker already
 * takes new tasks: a running execution's file system is never touched (unmounted under it, the task's
 * writes and outputs would go to a detached file system and its watch would count the data dir's). Any
 * other mount below the executions dir is not ours and is left alone. Never throws.
 */
export async function unmountStale(
  tools: TaskFsTools,
  executionsDir: string,
  deps: StaleTaskFsDeps,
): Promise<string[]> {
  let mounts: ReturnType<typeof parseMountinfo>;
  try {
    mounts = parseMountinfo(await readFile('/proc/self/mountinfo', 'utf8'));
  } catch {
    return [];
  }
  // mountinfo names each mount point as the kernel resolved it: a data dir named through a link would
  // match nothing, and each such file system (its image's room taken) would stay until a reboot.
  const base = await realpath(executionsDir).catch(() => executionsDir);
  const prefix = `${base.replace(/\/+$/, '')}/`;
  const candidates = new Map<string, string>();
  for (const m of mounts) {
    if (!m.point.startsWith(prefix) || !m.point.endsWith('/task')) continue;
    const id = m.point.slice(prefix.length, -'/task'.length);
    if (SAFE_ID.test(id)) candidates.set(m.point, id);
  }
  const running = deps.running();
  const done: string[] = [];
  for (const [point, id] of candidates) {
    if (running.has(id) || !deps.known(id)) continue;
    await unmountAt(tools, point);
    await rm(join(point, '..', TASK_IMAGE), { force: true }).catch(() => undefined);
    done.push(point);
  }
  return done;
}
