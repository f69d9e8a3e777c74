import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';

/**
 * `npm start` builds first; an incremental build makes that a few seconds when nothing changed instead
 * of half a minute (docs/operations.md). The build info lives inside dist/, so removing dist/ forces a
 * full build (tsc skips emitting when its build info says the outputs are current).
 */
describe('tsconfig.build.json', () => {
  it('builds incrementally, with its build info inside dist/', () => {
    const cfg = JSON.parse(readFileSync(join(packageRoot(), 'tsconfig.build.json'), 'utf8')) as {
      compilerOptions: { incremental?: boolean; tsBuildInfoFile?: string };
    };
    expect(cfg.compilerOptions.incremental).toBe(true);
    expect(cfg.compilerOptions.tsBuildInfoFile).toMatch(/^dist\//);
  });
});
