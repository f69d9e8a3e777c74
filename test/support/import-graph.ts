import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

/**
 * The import graph of the project's own TypeScript sources, read from the files (no compiler): every
 * relative `import`, `import type`, `export … from` and side-effect import, resolved to a file under the
 * package root. Used by the boundaries tests (test/unit/boundaries/), which fail on import cycles and on
 * imports that point up a folder's rank table.
 */

/** One file's relative imports, as package-relative paths with `/` separators. */
export type ImportGraph = Map<string, string[]>;

/** Removes comments (so prose may show an import) while keeping line numbers. */
export function stripComments(source: string): string {
  return source
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' '))
    .replace(/(^|[^:'"`\\])\/\/.*$/gm, (_m, pre: string) => pre);
}

/** Every module specifier a source imports or re-exports (type-only imports included). */
export function importSpecifiers(source: string): string[] {
  const specs: string[] = [];
  const code = stripComments(source);
  const re =
    /\b(?:import|export)\b[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*['"]([^'"]+)['"]|\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g;
  for (const m of code.matchAll(re)) specs.push((m[1] ?? m[2] ?? m[3])!);
  return specs;
}

/**
 * The package-relative file a relative specifier of `from` names (`./x.js` → `dir/x.ts`), or undefined
 * for a package import or a specifier that names no source file (a JSON file, a generated asset).
 */
export function resolveSpecifier(root: string, from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const abs = resolve(root, from, '..', spec);
  const candidates = [
    abs.replace(/\.js$/, '.ts'),
    abs.replace(/\.mjs$/, '.mts'),
    `${abs}.ts`,
    join(abs, 'index.ts'),
  ];
  for (const c of candidates)
    if (c.endsWith('.ts') && existsSync(c)) return relative(root, c).split('\\').join('/');
  return undefined;
}

/** Every `.ts` file (not `.d.ts`) under `dirs` (package-relative), skipping node_modules and dist. */
export function sourceFiles(root: string, dirs: readonly string[]): string[] {
  const out: string[] = [];
  for (const dir of dirs) {
    const abs = join(root, dir);
    if (!existsSync(abs)) continue;
    for (const f of readdirSync(abs, { recursive: true }).map(String)) {
      const rel = join(dir, f).split('\\').join('/');
      if (rel.includes('node_modules/') || rel.startsWith('dist/')) continue;
      if (rel.endsWith('.ts') && !rel.endsWith('.d.ts')) out.push(rel);
    }
  }
  return out.sort();
}

/** The graph of `files` (package-relative), from their sources on disk or from `sources` when given. */
export function importGraph(
  root: string,
  files: readonly string[],
  sources: ReadonlyMap<string, string> = new Map(),
): ImportGraph {
  const graph: ImportGraph = new Map();
  for (const file of files) {
    const source = sources.get(file) ?? readFileSync(join(root, file), 'utf8');
    const targets = importSpecifiers(source)
      .map(
        (s) =>
          resolveSpecifier(root, file, s) ?? (sources.size > 0 ? virtualTarget(file, s, sources) : undefined),
      )
      .filter((t): t is string => t !== undefined);
    graph.set(file, [...new Set(targets)].sort());
  }
  return graph;
}

/** For planted test sources that do not exist on disk: resolve among the given names. */
function virtualTarget(from: string, spec: string, sources: ReadonlyMap<string, string>): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const base = from.split('/').slice(0, -1);
  for (const part of spec.replace(/\.js$/, '.ts').split('/')) {
    if (part === '.') continue;
    if (part === '..') base.pop();
    else base.push(part);
  }
  const name = base.join('/');
  return sources.has(name) ? name : undefined;
}

/** The strongly connected components with more than one file (or a file importing itself): the cycles. */
export function cycles(graph: ImportGraph): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(scc.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!idx.has(v)) visit(v);
  return found;
}

/**
 * A folder's rank table: each entry a path prefix (a folder ending in `/`, or one file) and its rank.
 * A file may import files of a lower rank or of its own entry; an import of an equal or higher rank in
 * another entry points sideways or up. The longest matching prefix decides a file's entry.
 */
export type RankTable = ReadonlyArray<readonly [prefix: string, rank: number]>;

/** The entry of `file` in `table` (longest prefix), or undefined when no entry covers it. */
export function entryOf(table: RankTable, file: string): readonly [string, number] | undefined {
  let best: readonly [string, number] | undefined;
  for (const e of table)
    if (
      (file === e[0] || (e[0].endsWith('/') && file.startsWith(e[0]))) &&
      (!best || e[0].length > best[0].length)
    )
      best = e;
  return best;
}

/**
 * The imports that break `table`: `from → to (why)` for each edge between two entries of the table
 * where the target's rank is not lower than the importer's. Edges to files outside the table are not
 * judged here (another rule covers them).
 */
export function rankViolations(graph: ImportGraph, table: RankTable): string[] {
  const out: string[] = [];
  for (const [from, targets] of graph) {
    const a = entryOf(table, from);
    if (!a) continue;
    for (const to of targets) {
      const b = entryOf(table, to);
      if (!b || a[0] === b[0]) continue;
      if (b[1] >= a[1]) out.push(`${from} → ${to} (${a[0]} rank ${a[1]} imports ${b[0]} rank ${b[1]})`);
    }
  }
  return out.sort();
}
