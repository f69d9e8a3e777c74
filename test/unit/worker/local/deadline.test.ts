import { describe, expect, it } from 'vitest';
import { PAST_DEADLINE, untilDeadline } from '../../../../worker/local/deadline.js';
import { AdvancingClock } from '../../../support/advancing-clock.js';

/** A backfilled run's deadline raced against its setup (worker/local/deadline.ts, ADR 0049 §5). */
describe('untilDeadline', () => {
  it('answers the work when it ends first, its error when it fails, and waits for it alone with no deadline', async () => {
    const clock = new AdvancingClock();
    expect(await untilDeadline(Promise.resolve('set up'), clock.now() + 60_000, clock, 5)).toBe('set up');
    await expect(
      untilDeadline(Promise.reject(new Error('no inputs')), clock.now() + 60_000, clock, 5),
    ).rejects.toThrow('no inputs');
    const never = untilDeadline(
      new Promise<string>((r) => setTimeout(() => r('late'), 30)),
      Infinity,
      clock,
      5,
    );
    clock.advance(3_600_000);
    expect(await never).toBe('late');
  });

  it('answers PAST_DEADLINE once the clock passes the deadline, however long the work goes on', async () => {
    const clock = new AdvancingClock();
    const stuck = new Promise<string>(() => undefined);
    const raced = untilDeadline(stuck, clock.now() + 10_000, clock, 5);
    clock.advance(10_000);
    expect(await raced).toBe(PAST_DEADLINE);
    // A deadline already past answers at once.
    expect(await untilDeadline(stuck, clock.now() - 1, clock, 5)).toBe(PAST_DEADLINE);
  });
});
