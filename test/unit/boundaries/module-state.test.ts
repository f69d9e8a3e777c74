import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';
import { sourceFiles, stripComments } from '../../support/import-graph.js';

/**
 * No module-level mutable state in src/broker/ and src/domain/ (docs/architecture.md): a master's caches,
 * shares and work under way are fields of its runtime (src/broker/runtime.ts, `deps.runtime`), and its
 * metrics events go through its channel (`deps.events`), so two masters in one process never share state
 * and a reader of deps sees all of it; the domain is pure and keeps none. Read from the sources (formatted
 * by Biome: a top-level statement starts at column 0, and a multi-line one ends on a column-0 line that
 * closes it). Flagged, at the top level:
 *
 * - any `let` or `var`;
 * - a `const` whose value is a new collection: `new Map|Set|WeakMap|WeakSet|Array(…)`, `Array(…)`,
 *   an array literal `[…]` or an object literal `{…}`;
 *
 * unless the value cannot be changed through its name: typed `Readonly…<…>`, `readonly …[]`,
 * `{ readonly [K in …]: … }` or a TransitionTable (a `Readonly` record of `Readonly` records), written `… as const`, or wrapped in
 * `Object.freeze(…)`. A RegExp (literal or `new RegExp`) is not a collection and is never flagged. The
 * scanner is checked on planted sources below.
 */

const ROOT = packageRoot();
const SCOPE = ['src/broker', 'src/domain'];

/**
 * Constants the rule would flag that no code changes, each with why it stays as it is. Keep it short:
 * a table that is read only should say so in its type (`ReadonlySet`, `Readonly<Record<…>>`, `as const`).
 */
const ALLOWED: ReadonlyArray<readonly [file: string, name: string, why: string]> = [];

/** A new collection as a value. */
const COLLECTION = /^(?:new\s+(?:Map|Set|WeakMap|WeakSet|Array)\b|Array\s*\(|\[|\{)/;
/** A type that forbids changing the value through its name. */
const READONLY_TYPE = /^(?:Readonly(?:Set|Map|Array)?\s*<|readonly\s|\{\s*readonly\s|TransitionTable\s*<)/;

/** One flagged binding: where, its name, and its form (`let`, `new Map`, `array literal`…). */
interface Mutable {
  file: string;
  line: number;
  name: string;
  form: string;
}

/** What a collection value is, for the message. */
function formOf(value: string): string {
  const made = /^new\s+(\w+)/.exec(value);
  if (made) return `new ${made[1]}`;
  if (value.startsWith('Array')) return 'Array()';
  return value.startsWith('[') ? 'array literal' : 'object literal';
}

/** The top-level mutables of one source. */
function moduleMutables(file: string, source: string): Mutable[] {
  const lines = stripComments(source).split('\n');
  const out: Mutable[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const binding = /^(?:export\s+)?(let|var|const)\s+([A-Za-z_$][\w$]*)/.exec(line);
    if (!binding) continue;
    const [, kind, name] = binding as unknown as [string, string, string];
    if (kind !== 'const') {
      out.push({ file, line: i + 1, name, form: kind });
      continue;
    }
    // The statement: this line, or up to the column-0 line that closes it.
    let end = i;
    if (!line.trimEnd().endsWith(';'))
      while (end + 1 < lines.length && !/^[\]})]/.test(lines[end] as string)) end++;
    const statement = lines.slice(i, end + 1).join('\n');
    const at = statement.search(/\s=\s(?!>)/);
    if (at < 0) continue;
    const head = statement.slice(binding[0].length, at).trim();
    const type = head.startsWith(':') ? head.slice(1).trim() : '';
    const value = statement.slice(at).replace(/^\s=\s*/, '');
    if (!COLLECTION.test(value)) continue;
    if (READONLY_TYPE.test(type) || /\bas\s+const\b[^;]*;?\s*$/.test(statement)) continue;
    if (/^Object\.freeze\s*\(/.test(value)) continue;
    out.push({ file, line: i + 1, name, form: formOf(value) });
  }
  return out;
}

/** `file:line name (form)`. */
const show = (m: Mutable) => `${m.file}:${m.line} ${m.name} (${m.form})`;

/** Every flagged mutable of `sources` not in ALLOWED. */
function violations(sources: ReadonlyMap<string, string>): string[] {
  return [...sources]
    .flatMap(([file, source]) => moduleMutables(file, source))
    .filter((m) => !ALLOWED.some(([file, name]) => file === m.file && name === m.name))
    .map(show);
}

describe('module-level state in src/broker/ and src/domain/', () => {
  it('has none: per-master state lives in deps.runtime (src/broker/runtime.ts)', () => {
    const files = sourceFiles(ROOT, SCOPE);
    expect(files.filter((f) => f.startsWith('src/broker/')).length).toBeGreaterThan(30);
    expect(files.filter((f) => f.startsWith('src/domain/')).length).toBeGreaterThan(30);
    const sources = new Map(files.map((f) => [f, readFileSync(join(ROOT, f), 'utf8')]));
    expect(violations(sources)).toEqual([]);
  });

  it('the scanner catches each form, and lets readonly tables, RegExps, functions and comments be', () => {
    const planted = [
      'let count = 0;',
      'export let last: string | null = null;',
      'var legacy = 1;',
      'const byStore = new WeakMap<object, number>();',
      'const memo = new Map<string, string>();',
      'const seen = new Set(["a"]);',
      'const held = new WeakSet<object>();',
      'const buf = new Array(4);',
      'const slots = Array(4).fill(0);',
      'const queue: string[] = [];',
      'const table: Record<string, number> = {};',
      'export const RANK: Record<string, number> = {',
      '  a: 1,',
      '};',
      // Not state: immutable by type, by `as const`, frozen, a RegExp, a scalar, a function, a class.
      'const NAMES: ReadonlySet<string> = new Set(["a"]);',
      'const BY: ReadonlyMap<string, number> = new Map();',
      'const LIST: readonly string[] = ["a"];',
      'const PAIRS: ReadonlyArray<readonly [string, number]> = [["a", 1]];',
      'const TABLE: Readonly<Record<string, number>> = { a: 1 };',
      'const BY_KIND: { readonly [K in Kind]: () => boolean } =',
      '  {',
      '    a: () => true,',
      '  };',
      'const MACHINE: TransitionTable<S, E> = {',
      '  A: { go: "B" },',
      '};',
      'export const STATES = ["A", "B"] as const;',
      'const RULES = {',
      '  a: "x",',
      '} as const satisfies Record<string, string>;',
      'const FROZEN = Object.freeze({ a: 1 });',
      'const WORD = /[a-z]+/g;',
      'const DYNAMIC = new RegExp("x");',
      'const LIMIT = 4 * 1024;',
      'const next = (): Promise<void> => new Promise((r) => setImmediate(r));',
      'export function f() {',
      '  let local = 0;',
      '  const inner = new Map();',
      '  return [local, inner];',
      '}',
      '// let inComment = 1; const c = new Map();',
      '/* const d = []; */',
    ].join('\n');
    expect(moduleMutables('src/broker/planted.ts', planted).map(show)).toEqual([
      'src/broker/planted.ts:1 count (let)',
      'src/broker/planted.ts:2 last (let)',
      'src/broker/planted.ts:3 legacy (var)',
      'src/broker/planted.ts:4 byStore (new WeakMap)',
      'src/broker/planted.ts:5 memo (new Map)',
      'src/broker/planted.ts:6 seen (new Set)',
      'src/broker/planted.ts:7 held (new WeakSet)',
      'src/broker/planted.ts:8 buf (new Array)',
      'src/broker/planted.ts:9 slots (Array())',
      'src/broker/planted.ts:10 queue (array literal)',
      'src/broker/planted.ts:11 table (object literal)',
      'src/broker/planted.ts:12 RANK (object literal)',
    ]);
  });
});
