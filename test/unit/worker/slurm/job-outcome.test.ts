import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { logTruncatedMarker } from '../../../../src/contracts/worker-protocol.js';
import {
  JobLogTail,
  type SlurmOutcome,
  signalName,
  slurmExit,
  slurmVerdict,
} from '../../../../worker/slurm/job-outcome.js';
import { LogBudget } from '../../../../worker/task-io/log-budget.js';

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

describe('slurmExit', () => {
  const end = (
    state: 'CANCELLED' | 'COMPLETED' | 'TIMEOUT',
    killReason: SlurmOutcome['killReason'],
    exitFileCode: number | null,
  ) =>
    slurmExit({
      ended: { state, exitCode: 0, signal: state === 'COMPLETED' ? null : 15 },
      lostDetail: null,
      exitFileCode,
      killReason,
      collection: { outputs: [], errors: [], requiredMissing: false },
      setupErrors: [],
      logErrors: [],
    });

  it('a job the broker cancelled that Slurm ended CANCELLED carries no exit code, even when exit.json says 0', () => {
    // srun can return 0 for a step it tore down: exit 0 would read as a clean finish (COMPLETED).
    expect(end('CANCELLED', 'CANCELLED', 0)).toMatchObject({ exit_code: null, failure_reason: 'CANCELLED' });
    expect(end('CANCELLED', 'PREEMPTED', 0)).toMatchObject({ exit_code: null, failure_reason: 'PREEMPTED' });
    expect(end('TIMEOUT', 'TIMED_OUT', 0)).toMatchObject({ exit_code: null, failure_reason: 'TIMED_OUT' });
  });

  it('a job that finished by itself keeps its exit code, even if a cancel was asked as it ended', () => {
    expect(end('COMPLETED', 'CANCELLED', 0)).toMatchObject({ exit_code: 0, failure_reason: 'CANCELLED' });
    expect(end('COMPLETED', null, 0)).toMatchObject({ exit_code: 0, failure_reason: null });
  });
});

describe('JobLogTail (the task log cap on a Slurm worker)', () => {
  it('delivers at most the cap of both streams together, then one marker line per stream, and reads no further', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-job-log-'));
    try {
      const files = { stdout: join(dir, 'stdout.log'), stderr: join(dir, 'stderr.log') };
      writeFileSync(files.stdout, 'a'.repeat(300));
      writeFileSync(files.stderr, 'b'.repeat(50));
      const got: Array<{ stream: string; offset: number; data: string }> = [];
      const tail = new JobLogTail(
        files,
        (stream, offset, data) => got.push({ stream, offset, data }),
        new LogBudget(200),
      );
      await tail.pump(false);
      // A flood after the cut is never read again.
      appendFileSync(files.stdout, 'c'.repeat(10_000));
      appendFileSync(files.stderr, 'd'.repeat(10_000));
      await tail.pump(true);
      const text = (s: string) =>
        got
          .filter((g) => g.stream === s)
          .map((g) => g.data)
          .join('');
      expect(text('stdout')).toBe(`${'a'.repeat(200)}${logTruncatedMarker(200)}`);
      expect(text('stderr')).toBe(logTruncatedMarker(200));
      // Offsets stay contiguous per stream: what the master stores is exactly the delivered text.
      for (const s of ['stdout', 'stderr']) {
        let at = 0;
        for (const g of got.filter((x) => x.stream === s)) {
          expect(g.offset).toBe(at);
          at += Buffer.byteLength(g.data);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('delivers everything under the cap, as before', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-job-log-'));
    try {
      const files = { stdout: join(dir, 'stdout.log'), stderr: join(dir, 'stderr.log') };
      writeFileSync(files.stdout, 'hello\n');
      const got: string[] = [];
      const tail = new JobLogTail(files, (_s, _o, data) => got.push(data));
      await tail.pump(true);
      expect(got.join('')).toBe('hello\n');
      expect(tail.errors()).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
