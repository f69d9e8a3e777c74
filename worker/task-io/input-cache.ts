import { randomUUID } from 'node:crypto';
import { constants, lstatSync, readdirSync, unlinkSync } from 'node:fs';
import { chmod, copyFile, lstat, mkdir, readdir, rename, stat, unlink, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { type Clock, systemClock } from '../../src/platform/clock.js';

/**
 * The worker's bounded cache of input blobs (ADR 0012): `<dataDir>/input-cache/<sha256>`, one file per
 * content, so a blob two tasks use is fetched once. Nothing here is trusted: the executor hashes what it
 * copies out of it (inputs.ts) and removes an entry whose bytes do not match its name. Above `maxBytes`
 * the least recently used entries go (a hit refreshes the file's mtime).
 */
export class InputCache {
  constructor(
    readonly dir: string,
    private readonly maxBytes: number,
    /** Stamps a hit's mtime (the LRU order); default the system clock. */
    private readonly clock: Clock = systemClock,
  ) {}

  /**
   * The path of the cached file for `sha256` (unverified: the caller hashes what it copies), or null. A hit
   * refreshes its place in the LRU order. Only a regular file is an entry: a link put there is not followed.
   */
  async lookup(sha256: string): Promise<string | null> {
    const path = join(this.dir, sha256);
    try {
      if (!(await lstat(path)).isFile()) return null;
      const seconds = this.clock.now() / 1000;
      await utimes(path, seconds, seconds).catch(() => undefined);
      return path;
    } catch {
      return null;
    }
  }

  /** Copies the verified file `from` in as the entry for `sha256` (a kernel copy), then trims the cache. */
  async add(sha256: string, from: string): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const tmp = join(this.dir, `.${sha256}.${process.pid}.${randomUUID()}.tmp`);
    try {
      await copyFile(from, tmp, constants.COPYFILE_EXCL);
      await chmod(tmp, 0o600);
      await rename(tmp, join(this.dir, sha256));
    } finally {
      await unlink(tmp).catch(() => undefined);
    }
    await this.trim(sha256);
  }

  /**
   * Removes the temporary files of copies that never completed (`add` renames each into place; a worker
   * that stopped mid-copy leaves one behind). For the worker's start, before any task runs.
   */
  removeLeftovers(): void {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return;
    }
    for (const name of names) {
      if (!/^\.[0-9a-f]{64}\..*\.tmp$/.test(name)) continue;
      const path = join(this.dir, name);
      try {
        // Only the files `add` makes; anything else of that name is left alone, and no entry stops the start.
        if (lstatSync(path).isFile()) unlinkSync(path);
      } catch {
        // gone meanwhile, or not ours to remove
      }
    }
  }

  /** Removes one entry (a damaged one). */
  async remove(sha256: string): Promise<void> {
    await unlink(join(this.dir, sha256)).catch(() => undefined);
  }

  private async trim(keep: string): Promise<void> {
    const names = (await readdir(this.dir)).filter((n) => /^[0-9a-f]{64}$/.test(n));
    const entries = await Promise.all(
      names.map(async (name) => {
        const st = await stat(join(this.dir, name)).catch(() => null);
        return { name, size: st?.size ?? 0, mtime: st?.mtimeMs ?? 0 };
      }),
    );
    let total = entries.reduce((n, e) => n + e.size, 0);
    for (const e of entries.sort((a, b) => a.mtime - b.mtime)) {
      if (total <= this.maxBytes) break;
      if (e.name === keep) continue;
      await this.remove(e.name);
      total -= e.size;
    }
  }
}
