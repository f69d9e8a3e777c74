import { defineConfig } from 'vitest/config';

/**
 * Three projects: main, domain (below) and slurm. The Slurm suites share one machine-wide Slurm (8 fake
 * GPUs, one slurmctld; the two-node cluster on other ports): they would see each other's jobs as foreign
 * use and race for the GPUs, so they run one file at a time, after everything else (sequence.groupOrder).
 */
const SLURM_SUITES = ['test/integration/slurm/**/*.test.ts', 'test/integration/cluster/slurm-*.test.ts'];

/**
 * The pure core's unit tests share their modules (isolate: false): src/domain keeps no state (rule 1;
 * test/unit/boundaries/module-state.test.ts), and these files stub, mock and set nothing global. A fresh
 * module graph per file cost more than the tests: 38 files took 12.0 s isolated, 3.7 s shared (2 cores,
 * load 5, 2026-12-05). Other suites stay isolated: they start masters, stub the environment, change umask.
 */
const SHARED_MODULE_SUITES = ['test/unit/domain/**/*.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    globalSetup: ['./test/support/global-setup.ts'],
    reporters: ['default', './test/support/summary-reporter.ts'],
    projects: [
      {
        extends: true,
        test: {
          name: 'main',
          include: ['test/**/*.test.ts'],
          exclude: [...SLURM_SUITES, ...SHARED_MODULE_SUITES],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'domain', include: SHARED_MODULE_SUITES, isolate: false, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: { name: 'slurm', include: SLURM_SUITES, fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
