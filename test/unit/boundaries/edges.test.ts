import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';
import { type ImportGraph, importGraph, sourceFiles } from '../../support/import-graph.js';

/**
 * Edges hold no policy (docs/architecture.md "Layers and import rules"): the REST and
 * dashboard routes (src/http/), the MCP endpoint (src/mcp/), the worker gateway (src/ws/) and the app
 * that assembles them (src/app.ts) parse, call the broker and format. None of them imports src/store/,
 * not even a type: what they need of it (the `Principal` type, the storage refusal) comes through the
 * broker (src/broker/principals.ts, src/broker/storage-refusal.ts). Read with the scanner of
 * test/support/import-graph.ts, which counts type-only imports and re-exports too.
 */

const ROOT = packageRoot();
/** The edges: path prefixes (a folder ending in `/`, or one file). */
const EDGES = ['src/http/', 'src/mcp/', 'src/ws/', 'src/app.ts'];
/** What no edge may import. */
const STORE = 'src/store/';

const under = (prefix: string, file: string) =>
  file === prefix || (prefix.endsWith('/') && file.startsWith(prefix));
const isEdge = (file: string) => EDGES.some((p) => under(p, file));

/** Every import of the store by an edge, as `from → to`. */
function edgeStoreImports(graph: ImportGraph): string[] {
  const out: string[] = [];
  for (const [from, targets] of graph)
    if (isEdge(from)) for (const to of targets) if (under(STORE, to)) out.push(`${from} → ${to}`);
  return out.sort();
}

describe('edges hold no policy', () => {
  const files = sourceFiles(ROOT, ['src']);
  const graph = importGraph(ROOT, files);

  it('has edge sources to check', () => {
    const edges = files.filter(isEdge);
    expect(edges).toEqual(expect.arrayContaining(['src/app.ts', 'src/ws/hub.ts', 'src/http/blobs.ts']));
    expect(edges.filter((f) => f.startsWith('src/mcp/')).length).toBeGreaterThan(0);
    expect(edges.length).toBeGreaterThan(10);
  });

  it('no edge (src/http/, src/mcp/, src/ws/, src/app.ts) imports src/store/, type-only imports included', () => {
    expect(edgeStoreImports(graph)).toEqual([]);
  });

  it('the rule catches an edge importing the store by a type, a value or a re-export, and only edges', () => {
    const planted = new Map([
      [
        'src/http/r.ts',
        "import type { Principal } from '../store/principals-repo.js';\nexport type R = Principal;",
      ],
      ['src/ws/g.ts', "import { asStorageUnavailable } from '../store/storage-errors.js';"],
      ['src/mcp/m.ts', "export { type Principal } from '../store/principals-repo.js';"],
      ['src/app.ts', "import { openStore } from './store/store.js';"],
      // The broker may import the store, and an edge may import the broker.
      ['src/broker/b.ts', "export type { Principal } from '../store/principals-repo.js';"],
      ['src/http/ok.ts', "import type { Principal } from '../broker/b.js';"],
      ['src/store/principals-repo.ts', 'export interface Principal { id: string }'],
      ['src/store/storage-errors.ts', 'export const asStorageUnavailable = 1;'],
      ['src/store/store.ts', 'export const openStore = 1;'],
    ]);
    const g = importGraph('/nonexistent-root', [...planted.keys()], planted);
    expect(edgeStoreImports(g)).toEqual([
      'src/app.ts → src/store/store.ts',
      'src/http/r.ts → src/store/principals-repo.ts',
      'src/mcp/m.ts → src/store/principals-repo.ts',
      'src/ws/g.ts → src/store/storage-errors.ts',
    ]);
  });
});
