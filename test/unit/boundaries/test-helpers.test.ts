import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';
import { sourceFiles, stripComments } from '../../support/import-graph.js';
import { requireOrSkip } from '../../support/require-or-skip.js';

/**
 * The tests keep one helper for each shared chore (ADR 0020): one `waitFor` (test/support/wait.ts), one
 * builder of an `ExecutionPlan` (`makePlan`, test/support/executor-plan.ts), and one policy for tests
 * that need something of the machine (`requireOrSkip`, test/support/require-or-skip.ts: skip with the
 * reason printed, fail under CI). Read from the sources; the scanner is tested on planted files below.
 */

const ROOT = packageRoot();
const WAIT = 'test/support/wait.ts';
const PLAN_BUILDER = 'test/support/executor-plan.ts';
const GUARD = 'test/support/require-or-skip.ts';

/** The rule each file breaks, as `file: rule` lines. */
function helperViolations(sources: ReadonlyMap<string, string>): string[] {
  const out: string[] = [];
  for (const [file, source] of sources) {
    const code = stripComments(source);
    if (file !== WAIT && /\bfunction\s+waitFor\b|\bwaitFor\s*=\s*(?:async\s*)?\(/.test(code))
      out.push(`${file}: defines a waitFor (use ${WAIT})`);
    if (file !== PLAN_BUILDER && /\bspec_digest\s*:/.test(code) && /\bkill_grace_seconds\s*:/.test(code))
      out.push(`${file}: builds an ExecutionPlan (use makePlan from ${PLAN_BUILDER})`);
    if (/\.skipIf\s*\(|\b(?:it|test|describe)\.skip\s*\(/.test(code))
      out.push(`${file}: skips without the guard (use runIf with requireOrSkip from ${GUARD})`);
    const guarded = /\b(?:requireOrSkip|ensureSlurm|startMultiNodeSlurm)\s*\(/.test(code);
    if (file !== GUARD && /\.runIf\s*\(/.test(code) && !guarded)
      out.push(`${file}: runIf on a condition that is not from requireOrSkip`);
  }
  return out;
}

describe('test helpers', () => {
  it('one waitFor, one plan builder, and every machine-dependent skip through requireOrSkip', () => {
    const files = sourceFiles(ROOT, ['test']).filter(
      (f) => f !== 'test/unit/boundaries/test-helpers.test.ts',
    );
    const sources = new Map(files.map((f) => [f, readFileSync(join(ROOT, f), 'utf8')]));
    expect(helperViolations(sources)).toEqual([]);
  });

  it('the scanner finds each kind of violation, and not in comments', () => {
    const planted = new Map([
      ['test/a.test.ts', 'async function waitFor(c: () => boolean) {}'],
      ['test/b.test.ts', "const p = { spec_digest: '0', kill_grace_seconds: 1 };"],
      ['test/c.test.ts', 'describe.skipIf(!root)("x", () => {});\nit.skip("y", () => {});'],
      ['test/d.test.ts', 'it.runIf(process.getuid?.() === 0)("z", () => {});'],
      [
        'test/e.test.ts',
        '// function waitFor() and describe.skipIf(x) in prose\nit.runIf(requireOrSkip("a", b))("ok")',
      ],
      [WAIT, 'export async function waitFor() {}'],
    ]);
    expect(helperViolations(planted)).toEqual([
      `test/a.test.ts: defines a waitFor (use ${WAIT})`,
      `test/b.test.ts: builds an ExecutionPlan (use makePlan from ${PLAN_BUILDER})`,
      `test/c.test.ts: skips without the guard (use runIf with requireOrSkip from ${GUARD})`,
      'test/d.test.ts: runIf on a condition that is not from requireOrSkip',
    ]);
  });
});

describe('requireOrSkip', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  it('lets available needs run, whatever CI says', () => {
    vi.stubEnv('CI', 'true');
    expect(requireOrSkip('bubblewrap', true)).toBe(true);
  });

  it('skips a missing need outside CI, saying so once', () => {
    vi.stubEnv('CI', '');
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    expect(requireOrSkip('a planted need', false, 'install it')).toBe(false);
    expect(requireOrSkip('a planted need', false, 'install it')).toBe(false);
    expect(warn.mock.calls).toEqual([['skipped: tests that need a planted need (install it)']]);
  });

  it('fails under CI, naming the need and how to provide it', () => {
    for (const ci of ['true', '1']) {
      vi.stubEnv('CI', ci);
      expect(() => requireOrSkip('root', false, 'run the tests as root')).toThrow(
        'these tests need root (run the tests as root); under CI they may not be skipped',
      );
    }
    vi.stubEnv('CI', 'false');
    vi.spyOn(console, 'warn').mockImplementation(() => {});
    expect(requireOrSkip('root', false)).toBe(false);
  });
});
