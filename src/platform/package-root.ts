import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The folder holding gpu-broker's package.json. Non-code assets (SQL migrations, the dashboard, the
 * qualification workload, client-kit templates) are read from the package root, so the same code works
 * from `src/` under vitest and from `dist/` after a build, without a copy step.
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'src'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('gpu-broker: cannot find the package root');
    dir = parent;
  }
}
