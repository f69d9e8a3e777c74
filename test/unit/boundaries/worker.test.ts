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
 * The worker's layout holds (docs/architecture.md "The worker's folders", ADR 0019): each folder imports
 * only folders of a lower rank (or itself), no file takes part in an import cycle (type imports
 * included), the worker reaches into `src/` only through the wire contracts, the platform helpers and
 * the execution table both ends share (ADR 0014), and every worker file sits in a ranked folder, so a new
 * folder has to be placed in the table before it can hold code. The checks are tested on planted
 * sources at the end, like the domain purity scanner.
 */

const ROOT = packageRoot();

/**
 * Lowest first. Folders of one rank know nothing of each other. The longest prefix decides, so
 * `slurm/cli/` (the typed Slurm commands, which know nothing of the broker) ranks below `slurm/`.
 */
const WORKER_RANKS: RankTable = [
  ['worker/store/', 1], //       the local SQLite store: executions, outbox, marks; migrations
  ['worker/samplers/', 1], //    card samplers (nvidia-smi, hy-smi, sim) and the sampling loop
  ['worker/task-io/', 1], //     what a task reads and writes: env, inputs, logs, outputs, mounts
  ['worker/slurm/cli/', 1], //   sbatch/scontrol/scancel, parsing, the job wrapper and rank script
  ['worker/sandbox/', 2], //     bwrap and container isolation, device nodes, task uids, run-as
  ['worker/link/', 2], //        the socket to the master and the durable outbox
  ['worker/executions/', 3], //  assign/cancel/query, reports, card and pin checks, the Executor port
  ['worker/local/', 4], //       the local executor: boxes, process groups, recovery by pgid
  ['worker/slurm/', 4], //       the Slurm executor, sampler and recovery by job id
  ['worker/daemon/', 5], //      startWorker: wiring, hello, welcome, inbound dispatch
];

/** What worker files may import outside worker/ (path prefixes; a file name stands for itself). */
const WORKER_MAY_REACH: readonly string[] = [
  'src/contracts/',
  'src/platform/',
  'src/domain/machines/execution.ts',
];

/** `from → to` for each import of a worker file that leaves worker/ for anything but WORKER_MAY_REACH. */
function reachViolations(graph: ImportGraph): string[] {
  const out: string[] = [];
  for (const [from, targets] of graph) {
    if (!from.startsWith('worker/')) continue;
    for (const to of targets) {
      if (to.startsWith('worker/')) continue;
      if (!WORKER_MAY_REACH.some((p) => to === p || (p.endsWith('/') && to.startsWith(p))))
        out.push(`${from} → ${to}`);
    }
  }
  return out.sort();
}

/** The worker files no entry of WORKER_RANKS covers. */
function unranked(files: readonly string[]): string[] {
  return files.filter((f) => f.startsWith('worker/') && entryOf(WORKER_RANKS, f) === undefined);
}

describe('worker boundaries', () => {
  const files = sourceFiles(ROOT, ['worker']);
  const graph = importGraph(ROOT, files);

  it('has worker sources to check', () => {
    expect(files.length).toBeGreaterThan(50);
  });

  it('every worker file sits in a ranked folder', () => {
    expect(unranked(files)).toEqual([]);
  });

  it('every rank entry holds files (no stale entry)', () => {
    for (const [prefix] of WORKER_RANKS)
      expect(
        files.some((f) => entryOf(WORKER_RANKS, f)?.[0] === prefix),
        prefix,
      ).toBe(true);
  });

  it('no import cycle among worker files, type imports included', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('no import points up the rank table, or sideways at an equal rank', () => {
    expect(rankViolations(graph, WORKER_RANKS)).toEqual([]);
  });

  it('reaches src/ only through contracts/, platform/ and domain/machines/execution.ts', () => {
    expect(reachViolations(graph)).toEqual([]);
  });

  it('the checks catch planted violations', () => {
    const sources = new Map([
      // allowed: down the table, inside a folder, the three ways into src/
      ['worker/daemon/start.ts', "import { run } from '../local/run.js';\nimport '../store/db.js';"],
      ['worker/local/run.ts', "import type { Box } from './box.js';\nimport '../../src/platform/clock.js';"],
      ['worker/local/box.ts', "import { x } from '../../src/domain/machines/execution.js';"],
      ['worker/store/db.ts', "import type { Plan } from '../../src/contracts/plan.js';"],
      // an upward import, and a sideways one between two folders of one rank
      ['worker/store/up.ts', "import { start } from '../daemon/start.js';"],
      ['worker/local/side.ts', "import type { S } from '../slurm/exec.js';"],
      ['worker/slurm/exec.ts', "export { run } from '../local/run.js';"],
      // slurm/cli/ ranks below slurm/ (the longest prefix decides)
      ['worker/slurm/cli/driver.ts', "import type { S } from '../exec.js';"],
      // a type-only cycle inside one folder
      ['worker/task-io/a.ts', "import type { B } from './b.js';"],
      ['worker/task-io/b.ts', "import type { A } from './a.js';"],
      // into src/ past the allowed doors
      [
        'worker/link/out.ts',
        "import { openDb } from '../../src/store/db.js';\nimport '../../src/domain/machines/task.js';",
      ],
      // a folder nobody ranked
      ['worker/newfolder/n.ts', "import '../store/db.js';"],
      ['worker/loose.ts', ''],
      ['src/platform/clock.ts', ''],
      ['src/domain/machines/execution.ts', ''],
      ['src/domain/machines/task.ts', ''],
      ['src/contracts/plan.ts', ''],
      ['src/store/db.ts', ''],
    ]);
    const planted = importGraph('/nonexistent-root', [...sources.keys()], sources);
    expect(cycles(planted)).toEqual([['worker/task-io/a.ts', 'worker/task-io/b.ts']]);
    expect(rankViolations(planted, WORKER_RANKS)).toEqual([
      'worker/local/side.ts → worker/slurm/exec.ts (worker/local/ rank 4 imports worker/slurm/ rank 4)',
      'worker/slurm/cli/driver.ts → worker/slurm/exec.ts (worker/slurm/cli/ rank 1 imports worker/slurm/ rank 4)',
      'worker/slurm/exec.ts → worker/local/run.ts (worker/slurm/ rank 4 imports worker/local/ rank 4)',
      'worker/store/up.ts → worker/daemon/start.ts (worker/store/ rank 1 imports worker/daemon/ rank 5)',
    ]);
    expect(reachViolations(planted)).toEqual([
      'worker/link/out.ts → src/domain/machines/task.ts',
      'worker/link/out.ts → src/store/db.ts',
    ]);
    expect(unranked([...sources.keys()])).toEqual(['worker/newfolder/n.ts', 'worker/loose.ts']);
  });
});
