import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { SpreadSequencer } from './test/support/spread-sequencer.js';

/**
 * Three projects: main, shared-modules (below) and slurm, in one group, on at least two workers.
 *
 * Two workers even on two cores: vitest's default is one fewer than the cores, which on the 2-core CI
 * machine ran every file one after another (659 s, then 547 s) and left the second core mostly idle: much
 * of a file's time is spent waiting on processes, sockets and timers (docs/performance.md, "The suite on
 * its own clock").
 *
 * The Slurm suites share one machine-wide Slurm (8 fake GPUs, one slurmctld; the two-node cluster on
 * other ports): they would see each other's jobs as foreign use and race for the GPUs, so they run one
 * file at a time, by a machine-wide lock each takes before its file is imported (setup file
 * test/support/slurm-setup.ts, lock in test/support/slurm-serial.ts), beside the other suites: they used
 * to run in a group of their own after everything else, a minute of a 2-core run with one core idle. The
 * sequencer (test/support/spread-sequencer.ts) spreads them among the main files so one rarely waits.
 */
const SLURM_SUITES = ['test/integration/slurm/**/*.test.ts', 'test/integration/cluster/slurm-*.test.ts'];

/**
 * Unit suites that share their modules (isolate: false) instead of loading a fresh module graph per file,
 * which cost more than their tests: the pure core (src/domain keeps no state, and
 * test/unit/boundaries/module-state.test.ts fails if it does) and the store, contracts, HTTP,
 * qualification and client-kit units, whose modules keep none either (their only module maps are
 * constant sets and file-digest's cache, keyed by path and stat). None of these files stubs, mocks or
 * sets anything global. Measured on 2 cores at load 5 (2026-12-05): test/unit/domain, 38 files, 12.0 s
 * isolated, 3.7 s shared; the other five folders, 26 files, 23.3 s and 11.0 s. Every other suite stays
 * isolated: they start masters and workers, stub the environment, change the umask, spy on globals.
 */
const SHARED_MODULE_SUITES = [
  'test/unit/domain/**/*.test.ts',
  'test/unit/store/**/*.test.ts',
  'test/unit/contracts/**/*.test.ts',
  'test/unit/http/**/*.test.ts',
  'test/unit/qualification/**/*.test.ts',
  'test/unit/client-kit/**/*.test.ts',
];

export default defineConfig({
  test: {
    maxWorkers: Math.max(2, availableParallelism() - 1),
    sequence: { sequencer: SpreadSequencer },
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
        },
      },
      {
        extends: true,
        test: {
          name: 'shared-modules',
          include: SHARED_MODULE_SUITES,
          isolate: false,
        },
      },
      {
        extends: true,
        test: { name: 'slurm', include: SLURM_SUITES, setupFiles: ['./test/support/slurm-setup.ts'] },
      },
    ],
  },
});
