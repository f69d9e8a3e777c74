import { describe, expect, it } from 'vitest';
import { Notifier } from '../../../../src/broker/notifier.js';
import { waitUntil } from '../../../../src/broker/tools/wait-until.js';
import { ManualClock } from '../../../../src/platform/clock.js';

/** The long poll of wait_for_task and wait_for_proposal, on a ManualClock. */

const setup = () => ({ clock: new ManualClock(), notifier: new Notifier() });

describe('waitUntil', () => {
  it('answers at once when the first read is settled', async () => {
    const deps = setup();
    expect(
      await waitUntil(
        deps,
        't',
        60_000,
        () => 1,
        (v) => v === 1,
      ),
    ).toEqual({ value: 1, timed_out: false });
  });

  it('re-reads on each notification and answers when a read is settled', async () => {
    const deps = setup();
    let state = 0;
    const answer = waitUntil(
      deps,
      't',
      60_000,
      () => state,
      (v) => v === 2,
    );
    state = 1;
    deps.notifier.notify('t'); // woken, not settled: waits again
    await new Promise((r) => setImmediate(r));
    state = 2;
    deps.notifier.notify('t');
    expect(await answer).toEqual({ value: 2, timed_out: false });
  });

  it('times out on the injected clock: a deadline already passed at a wake-up answers timed_out', async () => {
    const deps = setup();
    const answer = waitUntil(
      deps,
      't',
      60_000,
      () => 0,
      (v) => v === 1,
    );
    deps.clock.advance(60_000);
    deps.notifier.notify('t');
    expect(await answer).toEqual({ value: 0, timed_out: true });
  });

  it('stops when the notifier timer runs out even if the clock stands still, with one last read', async () => {
    const deps = setup();
    let reads = 0;
    const answer = await waitUntil(
      deps,
      't',
      20,
      () => ++reads,
      () => false,
    );
    expect(answer).toEqual({ value: 2, timed_out: true });
  });

  it('answers at once, timed_out, when the notifier is closed or the signal aborted', async () => {
    const deps = setup();
    const aborted = AbortSignal.abort();
    expect(
      await waitUntil(
        deps,
        't',
        60_000,
        () => 0,
        () => false,
        aborted,
      ),
    ).toEqual({
      value: 0,
      timed_out: true,
    });
    deps.notifier.close();
    expect(
      await waitUntil(
        deps,
        't',
        60_000,
        () => 0,
        () => false,
      ),
    ).toEqual({ value: 0, timed_out: true });
  });
});
