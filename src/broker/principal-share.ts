import { BrokerError } from '../contracts/errors.js';

/**
 * A per-principal share of an expensive call (docs/performance.md "Noisy neighbours"): at most `perPrincipal` calls of one principal
 * run at once; the principal's further calls wait in its own queue (first come, first served) and at
 * most `queuedPerPrincipal` of them may wait, past that the call is refused (UNAVAILABLE, nothing done).
 * Other principals have their own lanes, so one agent's flood of get_revision calls delays that agent,
 * not everyone: it can never hold more than `perPrincipal` of the master's interleaved diff loops.
 */

/** What one principal holds now, and the most it ever ran at once (for tests and metrics). */
export interface ShareStats {
  running: number;
  queued: number;
  peakRunning: number;
}

interface Lane {
  running: number;
  peakRunning: number;
  waiting: Array<() => void>;
}

export class PrincipalShare {
  private readonly lanes = new Map<string, Lane>();
  private peakAny = 0;

  constructor(
    readonly what: string,
    readonly perPrincipal: number,
    readonly queuedPerPrincipal: number,
  ) {
    if (!(perPrincipal >= 1)) throw new RangeError('perPrincipal must be at least 1');
  }

  /**
   * Runs `work` in `principalId`'s lane: at once when it has a free place, else after the calls queued
   * before it; refused when its queue is full. The place is given back however `work` ends. A call
   * whose `signal` aborts while it waits (its client went away) leaves the queue without running:
   * nobody would read its answer.
   */
  async run<T>(principalId: string, work: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (signal?.aborted) throw gone(this.what);
    const lane = this.lanes.get(principalId) ?? { running: 0, peakRunning: 0, waiting: [] };
    this.lanes.set(principalId, lane);
    if (lane.running >= this.perPrincipal) {
      if (lane.waiting.length >= this.queuedPerPrincipal)
        throw new BrokerError(
          'UNAVAILABLE',
          `${this.perPrincipal} ${this.what} calls of yours are running and ${lane.waiting.length} wait`,
          `Wait for your earlier ${this.what} calls to answer before sending more.`,
          { running: lane.running, queued: lane.waiting.length },
        );
      // The place is handed over by the call that leaves (`running` stays counted for us).
      await new Promise<void>((resolve, reject) => {
        const take = () => {
          signal?.removeEventListener('abort', leave);
          resolve();
        };
        const leave = () => {
          const at = lane.waiting.indexOf(take);
          if (at >= 0) lane.waiting.splice(at, 1);
          reject(gone(this.what));
        };
        lane.waiting.push(take);
        signal?.addEventListener('abort', leave, { once: true });
      });
    } else {
      lane.running++;
    }
    lane.peakRunning = Math.max(lane.peakRunning, lane.running);
    this.peakAny = Math.max(this.peakAny, lane.running);
    try {
      return await work();
    } finally {
      const next = lane.waiting.shift();
      if (next) next();
      else if (--lane.running === 0) this.lanes.delete(principalId);
    }
  }

  /** The most calls one principal ever ran at once, over all principals (never above `perPrincipal`). */
  peakRunning(): number {
    return this.peakAny;
  }

  /** The principal's lane now (zeros once it is empty: lanes are dropped when nothing runs). */
  stats(principalId: string): ShareStats {
    const lane = this.lanes.get(principalId);
    return lane
      ? { running: lane.running, queued: lane.waiting.length, peakRunning: lane.peakRunning }
      : { running: 0, queued: 0, peakRunning: 0 };
  }
}

/** A waiting call whose client went away. */
function gone(what: string): BrokerError {
  // The client is gone, so the code is for the logs: UNAVAILABLE, retryable, nothing done.
  return new BrokerError(
    'UNAVAILABLE',
    `the ${what} call was abandoned by its client while it waited for its turn`,
    'Nothing ran; send it again if you still want the answer.',
  );
}
