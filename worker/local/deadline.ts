import type { Clock } from '../../src/platform/clock.js';

/** What `untilDeadline` answers when the deadline came before the work ended. */
export const PAST_DEADLINE: unique symbol = Symbol('past deadline');

/**
 * `work`'s result, or PAST_DEADLINE once `clock` passes `deadline` (ms) first: a backfilled run's
 * deadline counts its setup (ADR 0049 §5), which would otherwise hold its cards for as long as its inputs
 * take. The clock decides; the timer only wakes up to look, at least every `checkMs`, so a clock that
 * jumps (a test's, a stepped system clock) is noticed. An infinite deadline waits for `work` alone.
 * `work` is not stopped: its caller undoes what it made once it ends.
 */
export function untilDeadline<T>(
  work: Promise<T>,
  deadline: number,
  clock: Clock,
  checkMs: number,
): Promise<T | typeof PAST_DEADLINE> {
  if (deadline === Number.POSITIVE_INFINITY) return work;
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const look = (): void => {
      const left = deadline - clock.now();
      if (left <= 0) resolve(PAST_DEADLINE);
      else timer = setTimeout(look, Math.min(left, checkMs));
    };
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
    look();
  });
}
