import { stopSlurmStartedByThisRun } from './slurm.js';

/**
 * vitest globalSetup: names this test run (GPU_BROKER_TEST_RUN, inherited by the test forks) so that
 * helpers which start machine-wide daemons (test/support/slurm.ts) can mark them as started by this
 * run, and stops those daemons at the end of the run. Starts nothing itself.
 */
export default function setup(): () => void {
  process.env.GPU_BROKER_TEST_RUN ??= `run-${process.pid}-${Date.now()}`;
  return () => stopSlurmStartedByThisRun();
}
