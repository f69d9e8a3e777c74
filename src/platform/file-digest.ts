import { createHash } from 'node:crypto';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

/**
 * sha256 of a file's bytes, or null when it cannot be read. Policy checks run inside a synchronous
 * SQLite transaction, so this is synchronous; results are cached by (path, size, mtime) because the same
 * interpreter is hashed on every revision.
 */
const cache = new Map<string, { size: number; mtimeMs: number; digest: string }>();

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
    if (hit && hit.size === st.size && hit.mtimeMs === st.mtimeMs) return hit.digest;
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      hash.update(buf.subarray(0, n));
    }
    const digest = hash.digest('hex');
    cache.set(path, { size: st.size, mtimeMs: st.mtimeMs, digest });
    return digest;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}
