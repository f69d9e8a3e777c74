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
 * The unit suites share their modules (isolate: false) instead of loading a fresh module graph per file,
 * which cost more than their tests. Safe because the modules they load keep no state a test could see:
 * src/domain and src/broker keep none (test/unit/boundaries/module-state.test.ts fails if they do: a
 * master's caches and shares are fields of its runtime), and the rest keep only constant sets, caches keyed
 * by path and stat (file-digest), probes of the host that do not change (boot id, own namespace, version),
 * a counter of cgroup probes, and the one spawner a worker process shares (worker/local/spawner.ts). The
 * files that change something global put it back themselves: teardown's `setTimeout` spy and file-modes'
 * umask in `finally`, test-helpers' `CI` stub and console spy in `afterEach`. Measured on 2 cores at load
 * 5 (2026-12-05): test/unit/domain, 38 files, 12.0 s isolated, 3.7 s shared; store, contracts, HTTP,
 * qualification and client-kit, 26 files, 23.3 s and 11.0 s; then the other unit folders (broker, worker,
 * cli, platform, boundaries, docs, master, mcp, support: 102 files) at load 8–12 on two workers, 74 s of
 * CPU (import 92 s summed over files) isolated against 30 s (import 16 s) shared, all passing.
 *
 * The master, cluster, CLI, e2e and top-level integration suites share them too: each starts its
 * masters and workers as objects of its own (a master's state is its runtime's, above) and closes them in
 * its hooks. At load 4–12 on two workers: test/integration/master, 33 files, 92 s of CPU isolated and
 * 52 s shared; test/integration/cluster, 37 files (not slurm-backend), about 150 s and 115 s; the CLI,
 * e2e and top-level integration suites, 23 files, 136 s and 107 s; the worker's daemon, Slurm CLI and
 * task-io suites, 16 files, 15 s and 10 s; all passing, alone and in a trial of every integration suite
 * shared. That trial failed in the other folders, which stay isolated: the worker's local, sandbox and
 * samplers suites (a fork bomb counted against the pids of a process other files had used, a task's env
 * compared with the test process's, the sampler option parser), qualification (ladder, runs).
 */
const SHARED_MODULE_SUITES = [
  'test/unit/**/*.test.ts',
  'test/integration/master/**/*.test.ts',
  'test/integration/cluster/**/*.test.ts',
  'test/integration/cli/**/*.test.ts',
  'test/integration/*.test.ts',
  'test/e2e/**/*.test.ts',
  'test/integration/worker/daemon/**/*.test.ts',
  'test/integration/worker/slurm/**/*.test.ts',
  'test/integration/worker/task-io/**/*.test.ts',
  'test/integration/worker/*.test.ts',
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
          exclude: SLURM_SUITES,
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
