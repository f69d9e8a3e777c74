import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/platform/package-root.js';

/**
 * Tests that spawn the built CLI (`node dist/src/cli/main.js`) need dist/ to match the sources. `npm test`
 * builds first; a test run on its own (`npx vitest run FILE`) calls `ensureBuilt()` in `beforeAll`, which
 * rebuilds only when a source file is newer than the built CLI (about 15 s on two cores).
 */

const SOURCE_DIRS = ['src', 'worker', 'qualification', 'client-kit'];

function newestSource(dir: string): number {
  let newest = 0;
  if (!existsSync(dir)) return newest;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (/\.(ts|sql)$/.test(entry.name)) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** Rebuilds dist/ with `tsc -p tsconfig.build.json` when it is missing or older than any source. */
export function ensureBuilt(): void {
  const root = packageRoot();
  const cli = join(root, 'dist', 'src', 'cli', 'main.js');
  const built = existsSync(cli) ? statSync(cli).mtimeMs : 0;
  const newest = Math.max(...SOURCE_DIRS.map((d) => newestSource(join(root, d))));
  if (built >= newest) return;
  try {
    execFileSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.build.json'], {
      cwd: root,
      stdio: 'pipe',
    });
  } catch (err) {
    // tsc still emits when some file has a type error (e.g. another change in progress); the
    // typecheck step of `npm test` reports those. Only a missing CLI stops the tests here.
    if (!existsSync(cli)) throw err;
  }
}
