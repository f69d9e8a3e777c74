import { describe, expect, it } from 'vitest';
import { deadlineDetail, type LocalOutcome, localVerdict } from '../../../../worker/local/verdict.js';

/** How a local execution's end becomes a failure reason (worker/local/verdict.ts). */

const base: LocalOutcome = {
  killReason: null,
  exitCode: 0,
  signal: null,
  oomKilled: false,
  breach: null,
  requiredMissing: false,
};

describe('localVerdict', () => {
  it("puts the executor's own cancel or time limit first, whatever the task did", () => {
    expect(localVerdict({ ...base, killReason: 'CANCELLED', exitCode: null, signal: 'SIGTERM' })).toBe(
      'CANCELLED',
    );
    expect(
      localVerdict({ ...base, killReason: 'TIMED_OUT', exitCode: null, signal: 'SIGKILL', oomKilled: true }),
    ).toBe('TIMED_OUT');
    expect(localVerdict({ ...base, killReason: 'CANCELLED', requiredMissing: true })).toBe('CANCELLED');
  });

  it('tells an OOM kill from any other signal', () => {
    expect(localVerdict({ ...base, exitCode: null, signal: 'SIGKILL', oomKilled: true })).toBe('OOM_KILLED');
    expect(localVerdict({ ...base, exitCode: null, signal: 'SIGKILL' })).toBe('KILLED_BY_SIGNAL');
    expect(localVerdict({ ...base, exitCode: null, signal: 'SIGSEGV', requiredMissing: true })).toBe(
      'KILLED_BY_SIGNAL',
    );
  });

  it('names the task limit that ended a failed task, and ignores it when the task still succeeded', () => {
    expect(localVerdict({ ...base, exitCode: null, signal: 'SIGKILL', breach: 'OUT_OF_MEMORY' })).toBe(
      'OUT_OF_MEMORY',
    );
    expect(localVerdict({ ...base, exitCode: 1, breach: 'OUT_OF_MEMORY', oomKilled: true })).toBe(
      'OUT_OF_MEMORY',
    );
    expect(localVerdict({ ...base, exitCode: null, signal: 'SIGKILL', breach: 'DISK_LIMIT' })).toBe(
      'DISK_LIMIT',
    );
    expect(localVerdict({ ...base, breach: 'OUT_OF_MEMORY' })).toBeNull();
    expect(localVerdict({ ...base, killReason: 'TIMED_OUT', signal: 'SIGKILL', breach: 'DISK_LIMIT' })).toBe(
      'TIMED_OUT',
    );
  });

  it('judges a task that exited by itself by its code, then its outputs', () => {
    expect(localVerdict(base)).toBeNull();
    expect(localVerdict({ ...base, exitCode: 3, requiredMissing: true })).toBe('EXIT_NONZERO');
    expect(localVerdict({ ...base, requiredMissing: true })).toBe('OUTPUT_MISSING');
  });
});

describe('deadlineDetail', () => {
  it('puts the deadline first when it stopped the run, and leaves any other detail alone', () => {
    const limits = { limits_detail: ['limits enforced: memory_mib 128 MiB'] };
    expect(deadlineDetail(undefined, limits)).toBe(limits);
    expect(deadlineDetail(undefined, {})).toEqual({});
    const stopped = deadlineDetail(120, limits).limits_detail ?? [];
    expect(stopped[0]).toContain('backfilled: stopped at its deadline of 120 s');
    expect(stopped.slice(1)).toEqual(limits.limits_detail);
    expect(deadlineDetail(120, {}).limits_detail).toHaveLength(1);
  });
});
