import { describe, expect, it } from 'vitest';
import { cleanedEvent, exitFailure } from '../../../../src/domain/machines/task.js';

/** How an exit report and a cleanup receipt end a task when a cancel raced the process's own exit. */

describe('exitFailure', () => {
  it('a clean exit labelled CANCELLED finished before the cancel took effect: no failure', () => {
    expect(exitFailure({ exit_code: 0, signal: null, failure_reason: 'CANCELLED' })).toBeNull();
  });

  it.each([
    [{ exit_code: null, signal: 'SIGTERM', failure_reason: 'CANCELLED' as const }, 'CANCELLED'],
    [{ exit_code: 143, signal: null, failure_reason: 'CANCELLED' as const }, 'CANCELLED'],
    [{ exit_code: null, signal: null, failure_reason: 'CANCELLED' as const }, 'CANCELLED'],
    [{ exit_code: 0, signal: null, failure_reason: 'OUTPUT_MISSING' as const }, 'OUTPUT_MISSING'],
    [{ exit_code: 0, signal: null, failure_reason: 'TIMED_OUT' as const }, 'TIMED_OUT'],
    [{ exit_code: 0, signal: null, failure_reason: null }, null],
  ])('keeps the worker’s verdict otherwise (%o)', (exit, expected) => {
    expect(exitFailure(exit)).toBe(expected);
  });
});

describe('cleanedEvent', () => {
  it('a success stays a success even when a cancel was desired', () => {
    expect(cleanedEvent(null, 'cancel')).toBe('cleaned_success');
    expect(cleanedEvent(null, 'run')).toBe('cleaned_success');
  });
  it('any failure under a desired cancel, or CANCELLED itself, ends CANCELLED', () => {
    expect(cleanedEvent('EXIT_NONZERO', 'cancel')).toBe('cleaned_cancelled');
    expect(cleanedEvent('CANCELLED', 'run')).toBe('cleaned_cancelled');
    expect(cleanedEvent('EXIT_NONZERO', 'run')).toBe('cleaned_failure');
  });
});
