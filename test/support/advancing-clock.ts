import type { Clock } from '../../src/platform/clock.js';

/**
 * The system clock, moved forward by hand: time passes as usual, and `advance` jumps it. For code that
 * reads its deadlines from an injected clock but also runs on real timers and real peers (a master with
 * real workers, an executor with a real task), where a frozen ManualClock would stall what must go on:
 * the test reaches a deadline at once instead of waiting for it.
 */
export class AdvancingClock implements Clock {
  private offset = 0;

  now(): number {
    return Date.now() + this.offset;
  }

  /** Moves time forward by `ms` milliseconds. */
  advance(ms: number): void {
    this.offset += ms;
  }
}
