import { describe, expect, it } from 'vitest';
import { type SlurmOutcome, signalName, slurmVerdict } from '../../../../worker/slurm/job-outcome.js';

/** How a Slurm job's end becomes a failure reason (worker/slurm/job-outcome.ts). */

const base: SlurmOutcome = {
  killReason: null,
  state: 'COMPLETED',
  exitCode: 0,
  signal: null,
  lost: false,
  requiredMissing: false,
};

describe('slurmVerdict', () => {
  it("puts the broker's own cancel or time limit first, whatever Slurm says", () => {
    expect(slurmVerdict({ ...base, killReason: 'CANCELLED', state: 'CANCELLED' }).failure).toBe('CANCELLED');
    expect(slurmVerdict({ ...base, killReason: 'TIMED_OUT', state: 'CANCELLED' }).failure).toBe('TIMED_OUT');
  });

  it("maps Slurm's own endings", () => {
    expect(slurmVerdict({ ...base, state: 'TIMEOUT', exitCode: null }).failure).toBe('TIMED_OUT');
    expect(slurmVerdict({ ...base, state: 'CANCELLED', exitCode: 143 })).toEqual({
      failure: 'KILLED_BY_SIGNAL',
      detail: 'the Slurm job was cancelled outside the broker',
    });
    expect(slurmVerdict({ ...base, state: 'OUT_OF_MEMORY' }).failure).toBe('OOM_KILLED');
    const limited = slurmVerdict({ ...base, state: 'OUT_OF_MEMORY', memoryLimitMib: 4096 });
    expect(limited.failure).toBe('OUT_OF_MEMORY');
    expect(limited.detail).toContain('memory limit of 4096 MiB');
    expect(slurmVerdict({ ...base, state: 'NODE_FAIL' }).failure).toBe('WORKER_LOST');
    expect(slurmVerdict({ ...base, lost: true, state: 'UNKNOWN_TO_SLURM' }).failure).toBe('WORKER_LOST');
  });

  it('judges a job that ended by itself by its exit code and outputs', () => {
    expect(slurmVerdict(base).failure).toBeNull();
    expect(slurmVerdict({ ...base, requiredMissing: true }).failure).toBe('OUTPUT_MISSING');
    expect(slurmVerdict({ ...base, state: 'FAILED', exitCode: 3 }).failure).toBe('EXIT_NONZERO');
    expect(slurmVerdict({ ...base, state: 'FAILED', exitCode: null, signal: 'SIGKILL' }).failure).toBe(
      'KILLED_BY_SIGNAL',
    );
    expect(signalName(15)).toBe('SIGTERM');
  });
});
