import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * vitest's own order (by group order, project, then the slowest or, with no record, the largest file
 * first), with the Slurm suites spread evenly among the main project's files instead of queued together.
 * The Slurm suites run one at a time (test/support/slurm-serial.ts): queued back to back, the second would
 * hold a worker waiting for the first; spread out, the workers run other files meanwhile. The first Slurm
 * suite in vitest's order (the largest, slurm-backend) goes first, so it overlaps the most other work.
 */
export class SpreadSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const serial = sorted.filter((s) => s.project.name === 'slurm');
    const main = sorted.filter((s) => s.project.name === 'main');
    const rest = sorted.filter((s) => s.project.name !== 'slurm' && s.project.name !== 'main');
    return [...spread(main, serial), ...rest];
  }
}

/** `between` evenly among `items`, the first of `between` before the first item. */
export function spread<T>(items: readonly T[], between: readonly T[]): T[] {
  if (between.length === 0) return [...items];
  const out: T[] = [];
  const step = items.length / between.length;
  let next = 0;
  items.forEach((item, i) => {
    while (next < between.length && i >= Math.floor(next * step)) out.push(between[next++] as T);
    out.push(item);
  });
  while (next < between.length) out.push(between[next++] as T);
  return out;
}
