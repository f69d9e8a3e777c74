import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';
import {
  cycles,
  entryOf,
  type ImportGraph,
  importGraph,
  type RankTable,
  rankViolations,
  sourceFiles,
} from '../../support/import-graph.js';

/**
 * The master's rooms, by layer (docs/architecture.md "Layers and import rules", ADR 0020): a file may
 * import files of a lower rank or of its own folder, never one of an equal or higher rank in another
 * folder, and never round in a cycle (type-only imports included). Read from the sources with the
 * scanner of test/support/import-graph.ts, which the last test checks on planted sources.
 */

const ROOT = packageRoot();
/** The folders judged here; worker/ has its own test (it reaches src/ only through a few files). */
const SCOPE = ['src', 'qualification', 'client-kit'];

/**
 * The top level. contracts < platform < domain < store < broker < edges < app < master < main < cli,
 * with qualification/ and client-kit/ placed where their imports put them: the workload's names and the
 * pure verifier below broker (which records evidence with them), the runner and the kit builder beside
 * the app, below src/master/ which starts them.
 */
const TOP: RankTable = [
  ['src/contracts/', 0],
  ['src/platform/', 1],
  ['src/domain/', 2],
  ['qualification/workload/', 2],
  ['src/store/', 3],
  ['qualification/verify/', 3],
  ['src/broker/', 4],
  ['src/http/', 5],
  ['src/mcp/', 5],
  ['src/ws/', 5],
  ['src/app.ts', 6],
  ['qualification/run/', 6],
  ['client-kit/', 6],
  ['src/master/', 7],
  ['src/main.ts', 8],
  ['src/cli/', 9],
];

/**
 * Inside src/broker/: what every use case names (the ports, topics, the notifier and the typed events
 * beside it, the fleet's memory, and the classes of the runtime's state), then runtime.ts (the master's
 * in-memory state), then deps.ts, then the shared guards, then the state machines, then the standing
 * grants' fence (a preempted run queued again is fenced by the worker session), then the worker session,
 * and on top the tools and the background loops, which may use everything below but
 * not each other.
 */
const BROKER: RankTable = [
  ['src/broker/ports.ts', 1],
  ['src/broker/topics.ts', 1],
  ['src/broker/notifier.ts', 1],
  ['src/broker/events.ts', 1],
  ['src/broker/fleet.ts', 1],
  ['src/broker/storage-refusal.ts', 1],
  ['src/broker/principal-share.ts', 1],
  ['src/broker/diff-memo.ts', 1],
  ['src/broker/fair-share.ts', 1],
  ['src/broker/verified-cache.ts', 1],
  ['src/broker/runtime.ts', 2],
  ['src/broker/deps.ts', 3],
  ['src/broker/principals.ts', 4],
  ['src/broker/verified-blob.ts', 4],
  ['src/broker/review-decisions.ts', 4],
  ['src/broker/inspection-memo.ts', 5],
  ['src/broker/grant-request-quota.ts', 4],
  ['src/broker/machines/', 5],
  ['src/broker/grant-fence.ts', 6],
  ['src/broker/workers/', 7],
  ['src/broker/tools/', 8],
  ['src/broker/loops/', 8],
];

/**
 * Inside src/domain/, by concept (docs/architecture.md): the state machines, the policy's findings and the
 * qualification ladder name nothing of each other; scheduling, review and grants build on those; what
 * the master keeps and prunes (audit vocabulary, quotas, pruning) names the machines and the grants.
 */
const DOMAIN: RankTable = [
  ['src/domain/accounts/', 1],
  ['src/domain/machines/', 1],
  ['src/domain/policy/', 1],
  ['src/domain/qualification/', 1],
  ['src/domain/scheduling/', 2],
  ['src/domain/review/', 2],
  ['src/domain/grants/', 2],
  ['src/domain/retention/', 3],
];

/**
 * Inside src/cli/, by who runs the command: the plumbing every command shares (arguments, output, the
 * master client, the shared flags), then one folder per audience with its command specs beside its
 * commands (host: start, serve, worker; agent: propose, run, task, mcp-stdio; review: review, grant and
 * the agent reviewer; operator: token, status, cards, qualify, client-kit, audit), which never import
 * each other, then the command table and the entry point.
 */
const CLI: RankTable = [
  ['src/cli/common/', 1],
  ['src/cli/host/', 2],
  ['src/cli/agent/', 2],
  ['src/cli/review/', 2],
  ['src/cli/operator/', 2],
  ['src/cli/commands.ts', 3],
  ['src/cli/main.ts', 4],
];

/** The tables inside a top-level folder: every file under the prefix needs an entry of its table. */
const INNER: ReadonlyArray<readonly [prefix: string, name: string, table: RankTable]> = [
  ['src/broker/', 'broker', BROKER],
  ['src/domain/', 'domain', DOMAIN],
  ['src/cli/', 'cli', CLI],
];

/** Targets only the named importers (path prefixes) may import: what starts a runner or builds a kit. */
const ONLY_FROM: ReadonlyArray<readonly [target: string, importers: readonly string[]]> = [
  ['qualification/run/', ['src/master/', 'qualification/run/']],
  ['client-kit/build.ts', ['src/master/', 'src/cli/operator/client-kit.ts']],
];

/** Imports that are refused whatever the ranks say. */
const NEVER: ReadonlyArray<readonly [from: string, to: string]> = [['client-kit/', 'src/cli/']];

const under = (prefix: string, file: string) =>
  file === prefix || (prefix.endsWith('/') && file.startsWith(prefix));

/** Files of src/ (and of the folders placed beside it) that no entry of a table covers. */
function uncovered(files: readonly string[]): string[] {
  const out: string[] = [];
  for (const f of files) {
    if (!entryOf(TOP, f)) out.push(`${f}: no entry in the top-level table`);
    for (const [prefix, name, table] of INNER)
      if (f.startsWith(prefix) && !entryOf(table, f)) out.push(`${f}: no entry in the ${name} table`);
  }
  return out;
}

/** Imports of a restricted target from anywhere else, and imports that are never allowed. */
function forbidden(graph: ImportGraph): string[] {
  const out: string[] = [];
  for (const [from, targets] of graph)
    for (const to of targets) {
      for (const [target, importers] of ONLY_FROM)
        if (under(target, to) && !importers.some((p) => under(p, from)))
          out.push(`${from} → ${to} (only ${importers.join(', ')} may import ${target})`);
      for (const [a, b] of NEVER)
        if (under(a, from) && under(b, to)) out.push(`${from} → ${to} (${a} never imports ${b})`);
    }
  return out.sort();
}

describe('src/ boundaries', () => {
  const files = sourceFiles(ROOT, SCOPE);
  const graph = importGraph(ROOT, files);

  it('has sources to check', () => {
    expect(files.filter((f) => f.startsWith('src/broker/')).length).toBeGreaterThan(30);
    expect(files.length).toBeGreaterThan(150);
  });

  it('covers every file with an entry of the top-level table, and each src/broker/, src/domain/ and src/cli/ file with one of its folder table', () => {
    expect(uncovered(files)).toEqual([]);
  });

  it('has no import cycle in src/, qualification/ or client-kit/', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('imports only down the top-level table', () => {
    expect(rankViolations(graph, TOP)).toEqual([]);
  });

  it.each(INNER.map(([prefix, , table]) => [prefix, table] as const))(
    'imports only down the %s table',
    (_, table) => {
      expect(rankViolations(graph, table)).toEqual([]);
    },
  );

  it('lets only src/master/ start the qualification runner and build a kit; client-kit/ never imports src/cli/', () => {
    expect(forbidden(graph)).toEqual([]);
  });

  it('the rules catch a planted cycle, upward and sideways imports, an uncovered file and a forbidden import', () => {
    const planted = new Map([
      // A state machine importing a tool (broker rank 5 → 8), and a tool importing a loop (8 → 8).
      ['src/broker/machines/m.ts', "import { t } from '../tools/t.js';"],
      ['src/broker/tools/t.ts', "import type { L } from '../loops/l.js';\nexport const t = 1;"],
      ['src/broker/loops/l.ts', 'export type L = 1;'],
      // The domain importing the store (2 → 3); an edge importing another edge (5 → 5).
      ['src/domain/policy/d.ts', "export { s } from '../../store/s.js';"],
      // A state machine importing a review module (domain 1 → 2); a stray file at the domain's root.
      ['src/domain/machines/m.ts', "import { r } from '../review/r.js';"],
      ['src/domain/review/r.ts', 'export const r = 1;'],
      ['src/domain/stray.ts', 'export const y = 1;'],
      ['src/store/s.ts', 'export const s = 1;'],
      ['src/ws/w.ts', "import { h } from '../http/h.js';"],
      ['src/http/h.ts', 'export const h = 1;'],
      // A new file at the broker's root with no rank, and a new top-level folder.
      ['src/broker/stray.ts', 'export const x = 1;'],
      ['src/extras/e.ts', 'export const e = 1;'],
      // The broker starting the runner; the kit importing the CLI; an app file building a kit.
      ['src/broker/tools/q.ts', "import { runQualification } from '../../../qualification/run/r.js';"],
      ['qualification/run/r.ts', "import { v } from '../verify/v.js';\nexport const runQualification = v;"],
      ['qualification/verify/v.ts', 'export const v = 1;'],
      ['client-kit/k.ts', "import { c } from '../src/cli/agent/c.js';"],
      // One audience's command importing another's (cli 2 → 2).
      ['src/cli/review/r.ts', "import { c } from '../agent/c.js';"],
      ['client-kit/build.ts', 'export const build = 1;'],
      ['src/cli/agent/c.ts', 'export const c = 1;'],
      ['src/app.ts', "import { build } from '../client-kit/build.js';"],
      // A type-only cycle inside one folder.
      ['src/contracts/a.ts', "import type { B } from './b.js';\nexport type A = 1;"],
      ['src/contracts/b.ts', "import type { A } from './a.js';\nexport type B = A;"],
    ]);
    const g = importGraph('/nonexistent-root', [...planted.keys()], planted);
    expect(cycles(g)).toEqual([['src/contracts/a.ts', 'src/contracts/b.ts']]);
    expect(uncovered([...planted.keys()])).toEqual([
      'src/domain/stray.ts: no entry in the domain table',
      'src/broker/stray.ts: no entry in the broker table',
      'src/extras/e.ts: no entry in the top-level table',
    ]);
    expect(rankViolations(g, TOP)).toEqual([
      'client-kit/k.ts → src/cli/agent/c.ts (client-kit/ rank 6 imports src/cli/ rank 9)',
      'src/app.ts → client-kit/build.ts (src/app.ts rank 6 imports client-kit/ rank 6)',
      'src/broker/tools/q.ts → qualification/run/r.ts (src/broker/ rank 4 imports qualification/run/ rank 6)',
      'src/domain/policy/d.ts → src/store/s.ts (src/domain/ rank 2 imports src/store/ rank 3)',
      'src/ws/w.ts → src/http/h.ts (src/ws/ rank 5 imports src/http/ rank 5)',
    ]);
    expect(rankViolations(g, BROKER)).toEqual([
      'src/broker/machines/m.ts → src/broker/tools/t.ts (src/broker/machines/ rank 5 imports src/broker/tools/ rank 8)',
      'src/broker/tools/t.ts → src/broker/loops/l.ts (src/broker/tools/ rank 8 imports src/broker/loops/ rank 8)',
    ]);
    expect(rankViolations(g, DOMAIN)).toEqual([
      'src/domain/machines/m.ts → src/domain/review/r.ts (src/domain/machines/ rank 1 imports src/domain/review/ rank 2)',
    ]);
    expect(rankViolations(g, CLI)).toEqual([
      'src/cli/review/r.ts → src/cli/agent/c.ts (src/cli/review/ rank 2 imports src/cli/agent/ rank 2)',
    ]);
    expect(forbidden(g)).toEqual([
      'client-kit/k.ts → src/cli/agent/c.ts (client-kit/ never imports src/cli/)',
      'src/app.ts → client-kit/build.ts (only src/master/, src/cli/operator/client-kit.ts may import client-kit/build.ts)',
      'src/broker/tools/q.ts → qualification/run/r.ts (only src/master/, qualification/run/ may import qualification/run/)',
    ]);
  });
});
