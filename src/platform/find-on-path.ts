import { statSync } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';

/**
 * The absolute path of `name` in the first directory of `path` that has it as a regular file, or null.
 * Relative and empty entries (the empty one means the cwd) are skipped: the answer never depends on
 * where the process was started. The worker resolves every program it runs itself with this, once, on
 * a fixed search path (worker/sandbox/helper-commands.ts, worker/slurm/cli/driver.ts).
 */
export function findOnPath(name: string, path: string): string | null {
  for (const dir of path.split(delimiter)) {
    if (dir === '' || !isAbsolute(dir)) continue;
    const candidate = join(dir, name);
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return null;
}
