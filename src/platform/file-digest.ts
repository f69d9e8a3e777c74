import { createHash } from 'node:crypto';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

/**
 * sha256 of a file's bytes, or null when it cannot be read. Policy checks run inside a synchronous
 * SQLite transaction, so this is synchronous; results are cached because the same interpreter is hashed
 * on every revision. The cache key includes the inode and ctime, not only size and mtime: anyone who can
 * write a pinned script can also put its mtime back (`touch -r`), but not its ctime, so a same-size edit
 * with a restored mtime must not be served the old digest. Files changed in the last few seconds are not
 * cached at all ("racy git"): timestamps are coarse, so a second edit within one tick would look unchanged.
 */
const RACY_MS = 3000;
const cache = new Map<
  string,
  { size: number; mtimeMs: number; ctimeMs: number; ino: number; digest: string }
>();

/** Returns the sha256 of the regular file at `path`, or null if it is missing or not a regular file. */
export function fileSha256(path: string): string | null {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return null;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return null;
    const hit = cache.get(path);
    if (
      hit &&
      hit.size === st.size &&
      hit.mtimeMs === st.mtimeMs &&
      hit.ctimeMs === st.ctimeMs &&
      hit.ino === st.ino
    )
      return hit.digest;
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      hash.update(buf.subarray(0, n));
    }
    const digest = hash.digest('hex');
    if (Date.now() - Math.max(st.mtimeMs, st.ctimeMs) > RACY_MS)
      cache.set(path, { size: st.size, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino, digest });
    return digest;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}
