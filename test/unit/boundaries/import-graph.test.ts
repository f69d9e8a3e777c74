import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';
import { cycles, importGraph, rankViolations, sourceFiles } from '../../support/import-graph.js';

/**
 * The whole project's import graph has no cycle (type-only imports included): each file can be read
 * after the files it imports. The scanner (test/support/import-graph.ts) is tested on planted sources.
 */

const ROOT = packageRoot();
const DIRS = ['src', 'worker', 'client-kit', 'qualification', 'bench'];

describe('import graph', () => {
  it('has sources to check', () => {
    expect(sourceFiles(ROOT, DIRS).length).toBeGreaterThan(100);
  });

  it('has no import cycle, type imports included', () => {
    const graph = importGraph(ROOT, sourceFiles(ROOT, DIRS));
    expect(cycles(graph)).toEqual([]);
  });

  it('the scanner catches a planted cycle (type imports and re-exports too) and an upward import', () => {
    const sources = new Map([
      ['p/a.ts', "import type { B } from './b.js';\nexport type A = B;"],
      ['p/b.ts', "export { a } from './sub/c.js';\nexport type B = 1;"],
      ['p/sub/c.ts', "import { x } from '../a.js';\nexport const a = x;"],
      ['p/d.ts', "// import { nothing } from './a.js';\nimport './sub/c.js';"],
      ['p/self.ts', "import { s } from './self.js';"],
    ]);
    const graph = importGraph('/nonexistent-root', [...sources.keys()], sources);
    expect(cycles(graph)).toEqual([['p/a.ts', 'p/b.ts', 'p/sub/c.ts'], ['p/self.ts']]);
    const table = [
      ['p/sub/', 1],
      ['p/a.ts', 2],
      ['p/b.ts', 3],
      ['p/d.ts', 4],
    ] as const;
    expect(rankViolations(graph, table)).toEqual([
      'p/a.ts → p/b.ts (p/a.ts rank 2 imports p/b.ts rank 3)',
      'p/sub/c.ts → p/a.ts (p/sub/ rank 1 imports p/a.ts rank 2)',
    ]);
  });
});
