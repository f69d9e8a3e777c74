import { defineConfig } from 'vitest/config';

/**
 * Two projects. The Slurm suites share one machine-wide Slurm (8 fake GPUs, one slurmctld; the two-node
 * cluster on other ports): they would see each other's jobs as foreign use and race for the GPUs, so
 * they run one file at a time, after everything else (sequence.groupOrder).
 */
const SLURM_SUITES = ['test/integration/slurm/**/*.test.ts', 'test/integration/cluster/slurm-*.test.ts'];

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
          exclude: SLURM_SUITES,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'slurm', include: SLURM_SUITES, fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
