import type { Logger } from 'pino';
import type { CardSample } from '../../src/contracts/sample.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { CardSampler } from './card-sampler.js';

/**
 * The sampling loop (docs/worker-protocol.md): every interval, one sample of all cards, or why there is none.
 *
 * - One sample in flight at a time: a tick that finds the previous sample still running skips it, so a
 *   hanging tool never stacks up processes.
 * - A sample still running after STALL_INTERVALS intervals is reported as a sampler error at each
 *   further tick, so the master marks the cards UNKNOWN rather than trusting an old sample.
 * - Nothing ends the loop but `stop()`: every failure becomes a report, and the next tick tries again.
 */

/** Receives one report: the cards, or [] with the reason sampling failed. */
export type SampleReport = (report: {
  sampledAt: number;
  cards: CardSample[];
  samplerError: string | null;
}) => void;

/** What the loop needs. */
export interface SamplingLoopOptions {
  readonly sampler: CardSampler;
  readonly logger: Logger;
  /** First interval; the master's welcome may change it (`setInterval`). */
  readonly intervalMs: number;
  readonly onReport: SampleReport;
  /** Stamps `sampled_at` and measures a stalled sampler (default the system clock). */
  readonly clock?: Clock;
}

const STALL_INTERVALS = 3;
/** The `sampler_error` field holds at most 4096 characters. */
const MAX_ERROR_CHARS = 4096;

/** Runs the loop; see the module comment. */
export class SamplingLoop {
  private intervalMs: number;
  private timer: NodeJS.Timeout | undefined;
  private inFlightSince: number | null = null;
  private stopped = false;
  private failing = false;
  private latest: CardSample[] | null = null;
  private resolveFirst!: () => void;
  /** Settles after the first sample attempt (success or failure), so hello can carry real cards. */
  readonly firstAttempt: Promise<void>;

  private readonly clock: Clock;

  constructor(private readonly opts: SamplingLoopOptions) {
    this.intervalMs = opts.intervalMs;
    this.clock = opts.clock ?? systemClock;
    this.firstAttempt = new Promise((r) => {
      this.resolveFirst = r;
    });
  }

  /** The cards of the last successful sample; null before the first one. */
  latestCards(): CardSample[] | null {
    return this.latest;
  }

  /** The cards as of now: those of the last sample if it succeeded, [] while sampling fails. */
  currentCards(): CardSample[] {
    return this.failing ? [] : (this.latest ?? []);
  }

  /** Changes the interval from the next tick on. */
  setInterval(ms: number): void {
    this.intervalMs = ms;
  }

  /** Takes the first sample now and then one per interval. */
  start(): void {
    this.tick();
  }

  /**
   * Stops ticking. A sample still in flight is not waited for (a hanging tool must not hang the
   * shutdown); whatever it returns later is dropped.
   */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.resolveFirst();
  }

  private tick(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => this.tick(), this.intervalMs);
    const now = this.clock.now();
    if (this.inFlightSince !== null) {
      const waited = now - this.inFlightSince;
      if (waited >= STALL_INTERVALS * this.intervalMs) {
        this.report(now, [], `the sampler has not answered for ${waited} ms (still waiting for it)`);
      }
      return;
    }
    this.inFlightSince = now;
    void this.sampleOnce().finally(() => {
      this.inFlightSince = null;
      this.resolveFirst();
    });
  }

  private async sampleOnce(): Promise<void> {
    let cards: CardSample[];
    try {
      cards = await this.opts.sampler.sample();
    } catch (err) {
      const message = errorMessage(err);
      if (!this.failing) this.opts.logger.warn({ err: message }, 'worker: card sampling failed');
      this.failing = true;
      if (!this.stopped) this.report(this.clock.now(), [], message || 'sampler failed without a message');
      return;
    }
    if (this.failing) this.opts.logger.info('worker: card sampling works again');
    this.failing = false;
    this.latest = cards;
    if (!this.stopped) this.report(this.clock.now(), cards, null);
  }

  private report(sampledAt: number, cards: CardSample[], samplerError: string | null): void {
    const error = samplerError === null ? null : samplerError.slice(0, MAX_ERROR_CHARS);
    try {
      this.opts.onReport({ sampledAt, cards, samplerError: error });
    } catch (err) {
      // E.g. the store is closing; the loop itself must survive anything the report does.
      this.opts.logger.error({ err: (err as Error).message }, 'worker: could not queue a sample');
    }
  }
}
