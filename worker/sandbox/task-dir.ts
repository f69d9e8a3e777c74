import { randomUUID } from 'node:crypto';
import { chmod, lstat, readdir, rename, rm, rmdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * A task dir measured and removed by walking it (worker/sandbox/limits.ts's disk watch, where the task
 * dir has no file system of its own, and teardown and the crash sweep): what a hostile task does to hide
 * data from a walk (a path nested past PATH_MAX, a directory its uid made unreadable) is counted as over
 * the limit and removed all the same.
 */

/**
 * Errors of a walk that a task causes on purpose to hide what is below: a path nested past PATH_MAX, a
 * directory its uid (the worker's own, on a worker that is not root) made unreadable. Any other (the entry
 * went while it was looked at, the worker short of descriptors) skips the entry, as before.
 */
const HIDDEN_BY_TASK = new Set(['ENAMETOOLONG', 'EACCES', 'EPERM']);

/**
 * Bytes allocated below `dir` (st_blocks × 512, as du counts: sparse holes are free), never following
 * a symlink; `truncated` when more than `maxEntries` entries were seen; `unmeasured` says why part of the
 * tree could not be read (a directory nested past PATH_MAX, whose path no call takes: ENAMETOOLONG; one
 * the worker's user may not read: EACCES), which the watch counts as over the limit: otherwise a task
 * hides any amount of data there.
 */
export async function diskUse(
  dir: string,
  maxEntries: number,
): Promise<{ bytes: number; truncated: boolean; unmeasured?: string }> {
  let bytes = 0;
  let entries = 0;
  const stack = [dir];
  const unmeasured = (err: unknown) => ({
    bytes,
    truncated: false,
    unmeasured: `${(err as NodeJS.ErrnoException).code ?? 'error'} below the task dir`,
  });
  while (stack.length > 0) {
    const current = stack.pop()!;
    let names: string[];
    try {
      names = await readdir(current);
    } catch (err) {
      if (!HIDDEN_BY_TASK.has((err as NodeJS.ErrnoException).code ?? '')) continue;
      return unmeasured(err);
    }
    for (const name of names) {
      if (++entries > maxEntries) return { bytes, truncated: true };
      const path = join(current, name);
      try {
        const st = await lstat(path);
        bytes += st.blocks * 512;
        if (st.isDirectory()) stack.push(path);
      } catch (err) {
        // removed while we looked, unless hidden on purpose
        if (HIDDEN_BY_TASK.has((err as NodeJS.ErrnoException).code ?? '')) return unmeasured(err);
      }
    }
  }
  return { bytes, truncated: false };
}

/** A directory whose path is longer than this (bytes) is moved up before it is entered (removeTaskDir). */
const HOIST_PATH_BYTES = 3000;

/**
 * Removes a task dir and all below it once nothing of the task runs; never follows a symlink, never
 * throws. Unlike `rm -r` by path it also removes what a task nested past PATH_MAX (each directory whose
 * path grows past HOIST_PATH_BYTES is first renamed up to `dir`, so every path it names stays short) and
 * what a task of the worker's own uid (a worker that is not root) made unreadable (its directories are
 * made 0700 before they are read): either would otherwise stay on the worker's disk for good.
 */
export async function removeTaskDir(dir: string): Promise<void> {
  // What `rm -r` can remove goes first (it is faster); what it left is walked.
  await rm(dir, { recursive: true, force: true, maxRetries: 2 }).catch(() => undefined);
  if ((await lstat(dir).catch(() => null)) === null) return;
  const root = process.geteuid?.() === 0;
  const dirs: string[] = [];
  const stack = [dir];
  while (stack.length > 0) {
    const current = stack.pop()!;
    dirs.push(current);
    if (!root) await chmod(current, 0o700).catch(() => undefined);
    let names: string[];
    try {
      names = await readdir(current);
    } catch {
      continue;
    }
    // A directory's entries at once, as `rm -r` does.
    const entries = await Promise.all(
      names.map(async (name) => {
        const path = join(current, name);
        const st = await lstat(path).catch(() => null);
        if (st !== null && !st.isDirectory()) await unlink(path).catch(() => undefined);
        return { path, dir: st?.isDirectory() === true };
      }),
    );
    for (const entry of entries) {
      if (!entry.dir) continue;
      let path = entry.path;
      if (Buffer.byteLength(path) > HOIST_PATH_BYTES) {
        const up = join(dir, `.gpu-broker-removing-${randomUUID()}`);
        try {
          await rename(path, up);
        } catch {
          continue;
        }
        path = up;
      }
      stack.push(path);
    }
  }
  // Children were entered after their parents: removed in the reverse order, each is empty by then.
  for (const d of dirs.reverse()) await rmdir(d).catch(() => undefined);
}
