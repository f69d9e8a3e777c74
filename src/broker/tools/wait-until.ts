import type { BrokerDeps } from '../deps.js';

/**
 * The long poll behind `wait_for_task` and `wait_for_proposal`: reads the subject, and while it is not
 * settled waits for a notification on `topic`, at most `ms` in all (measured on `deps.clock`). A
 * notification carries no data, so every wake-up re-reads. It stops waiting when the deadline passes on
 * the clock, when the notifier's own timer for the time left runs out (so a test clock that stands still
 * cannot hold a caller forever), when `signal` aborts, or when the notifier closes (the master stops);
 * then it answers with one last read, `timed_out` unless that read is settled.
 */
export async function waitUntil<T>(
  deps: Pick<BrokerDeps, 'clock' | 'notifier'>,
  topic: string,
  ms: number,
  read: () => T,
  settled: (value: T) => boolean,
  signal?: AbortSignal,
): Promise<{ value: T; timed_out: boolean }> {
  const deadline = deps.clock.now() + ms;
  for (;;) {
    const value = read();
    if (settled(value)) return { value, timed_out: false };
    const left = deadline - deps.clock.now();
    if (left <= 0 || signal?.aborted || deps.notifier.isClosed) return { value, timed_out: true };
    if (!(await deps.notifier.waitFor(topic, left, signal))) {
      const last = read();
      return { value: last, timed_out: !settled(last) };
    }
  }
}
