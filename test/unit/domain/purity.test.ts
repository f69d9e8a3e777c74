import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';

/**
 * src/domain/ is pure (docs/architecture.md, the rules table): it imports nothing that does I/O and never reads the clock,
 * randomness, timers or the process. This test reads the sources and fails on the first violation.
 */

const DOMAIN = join(packageRoot(), 'src', 'domain');

/** Packages (and prefixes) the domain must never import. */
const FORBIDDEN_PACKAGES = [
  'better-sqlite3',
  'fastify',
  'ws',
  'pino',
  'undici',
  'ulid',
  'prom-client',
  '@modelcontextprotocol/',
  '@fastify/',
  '@peculiar/',
];
/** Folders of src/ the domain may import from (itself and the wire contracts). */
const ALLOWED_SRC_DIRS = ['domain', 'contracts'];

/** Ambient effects: the clock, randomness, timers, the process, global I/O. */
const FORBIDDEN_CALLS: Array<[RegExp, string]> = [
  [/\bDate\.now\s*\(/, 'Date.now()'],
  [/\bnew\s+Date\b/, 'new Date'],
  [/(?<!new\s+|[.\w])Date\s*\(/, 'Date()'],
  [/\bMath\.random\b/, 'Math.random'],
  [/\b(setTimeout|setInterval|setImmediate|queueMicrotask)\b/, 'timers'],
  [/\bprocess\s*[.[]/, 'process'],
  [/\bperformance\s*\.\s*now\b/, 'performance.now'],
  [/\bcrypto\s*\.\s*(randomUUID|getRandomValues|randomBytes)\b/, 'crypto randomness'],
  [/\bfetch\s*\(/, 'fetch'],
  [/\brequire\s*\(/, 'require()'],
  [/\bimport\s*\(/, 'dynamic import()'],
  [/\bconsole\s*\./, 'console'],
];

/** Removes comments (so prose may mention Date.now) while keeping line numbers. */
function stripComments(source: string): string {
  return source
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' '))
    .replace(/(^|[^:'"`\\])\/\/.*$/gm, (_m, pre: string) => pre);
}

/** Every module specifier a source imports or re-exports. */
function importSpecifiers(source: string): string[] {
  const specs: string[] = [];
  const re = /\b(?:import|export)\b[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*['"]([^'"]+)['"]/g;
  for (const m of source.matchAll(re)) specs.push((m[1] ?? m[2])!);
  return specs;
}

/** The purity violations in one domain source file (empty when pure). */
function violations(file: string, source: string): string[] {
  const code = stripComments(source);
  const found: string[] = [];
  const builtins = new Set(builtinModules.flatMap((b) => [b, `node:${b}`]));
  for (const spec of importSpecifiers(code)) {
    if (spec.startsWith('node:') || builtins.has(spec) || builtins.has(spec.split('/')[0] ?? ''))
      found.push(`imports Node built-in ${spec}`);
    else if (FORBIDDEN_PACKAGES.some((p) => spec === p || spec.startsWith(p.endsWith('/') ? p : `${p}/`)))
      found.push(`imports ${spec}`);
    else if (spec.startsWith('.')) {
      const target = relative(join(packageRoot(), 'src'), resolve(file, '..', spec));
      const dir = target.split(/[\\/]/)[0] ?? '';
      if (!ALLOWED_SRC_DIRS.includes(dir))
        found.push(`imports ${spec} (src/${target}: outside domain/contracts)`);
    } else if (spec !== 'zod') found.push(`imports package ${spec}`);
  }
  code.split('\n').forEach((line, i) => {
    for (const [re, what] of FORBIDDEN_CALLS) if (re.test(line)) found.push(`line ${i + 1}: ${what}`);
  });
  return found;
}

describe('src/domain purity', () => {
  const files = readdirSync(DOMAIN, { recursive: true })
    .map(String)
    .filter((f) => f.endsWith('.ts'))
    .map((f) => join(DOMAIN, f));

  it('has sources to check', () => {
    expect(files.length).toBeGreaterThanOrEqual(5);
  });

  it.each(files.map((f) => [relative(DOMAIN, f), f]))('%s does no I/O and reads no clock', (_name, file) => {
    expect(violations(file, readFileSync(file, 'utf8'))).toEqual([]);
  });

  it('the scanner itself catches each kind of violation', () => {
    const file = join(DOMAIN, 'fake.ts');
    const bad = [
      "import { readFileSync } from 'node:fs';",
      "import path from 'path';",
      "import type Database from 'better-sqlite3';",
      "export { Server } from '@modelcontextprotocol/sdk/server/index.js';",
      "import { pino } from 'pino';",
      "import { Store } from '../store/store.js';",
      "import 'reflect-metadata';",
      'const a = Date.now();',
      'const b = new Date();',
      'const c = Math.random();',
      'setTimeout(() => 0, 1);',
      'const d = process.env.X;',
      'const e = performance.now();',
      'const f = await import("./x.js");',
      'const g = Date();',
    ];
    for (const line of bad)
      expect({ line, caught: violations(file, line).length > 0 }).toEqual({ line, caught: true });
    const fine = [
      "import type { TaskSpec } from '../contracts/task-spec.js';",
      "import { applyTransition } from './state-machine.js';",
      '// Date.now() is passed in by the shell; never call new Date() here.',
      '/* process.env is read by main.ts */',
      'export function f(now: number): number { return now + 1; }',
    ].join('\n');
    expect(violations(file, fine)).toEqual([]);
  });
});
