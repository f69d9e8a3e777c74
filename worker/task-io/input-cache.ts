import { mkdir, readdir, readFile, rename, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Clock, systemClock } from '../../src/platform/clock.js';

/**
 * The worker's bounded cache of input blobs (issue 13): `<dataDir>/input-cache/<sha256>`, one file per
 * content, so a blob two tasks use is fetched once. Nothing here is trusted: the executor hashes what it
 * reads (inputs.ts) and removes an entry whose bytes do not match its name. Above `maxBytes`
 * the least recently used entries go (a hit refreshes the file's mtime).
 */
export class InputCache {
  constructor(
    readonly dir: string,
    private readonly maxBytes: number,
    /** Stamps a hit's mtime (the LRU order); default the system clock. */
    private readonly clock: Clock = systemClock,
  ) {}

  /** The cached bytes for `sha256` (unverified), or null. */
  async read(sha256: string): Promise<Buffer | null> {
    const path = join(this.dir, sha256);
    try {
      const bytes = await readFile(path);
      const seconds = this.clock.now() / 1000;
      await utimes(path, seconds, seconds).catch(() => undefined);
      return bytes;
    } catch {
      return null;
    }
  }

  /** Stores verified bytes, then trims the cache to its bound. */
  async write(sha256: string, bytes: Buffer): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const tmp = join(this.dir, `.${sha256}.${process.pid}.tmp`);
    await writeFile(tmp, bytes, { mode: 0o600 });
    await rename(tmp, join(this.dir, sha256));
    await this.trim(sha256);
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
