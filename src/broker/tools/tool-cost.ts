import { BrokerError } from '../../contracts/errors.js';
import type { BrokerDeps } from '../deps.js';
import type { CostShares } from '../runtime.js';

/**
 * What one call of a tool may cost the master, declared once per tool in the catalog (docs/security.md "Fair share between principals")
 * and enforced per principal by the dispatcher, so one principal's flood delays that principal:
 *
 * - `light`: an index seek, a few rows, or a write bounded by its input and a stored quota. Nothing
 *   beyond the connection caps (src/http/connection-limits.ts).
 * - `heavy`: work that grows with stored data or with the input (coverage of a spec, a diff, a prompt, a
 *   page of logs or of a list). Runs in the principal's heavy lane (`quotas.heavy_calls_per_principal`
 *   at once, `quotas.heavy_queued_per_principal` waiting, past that UNAVAILABLE) and within its time
 *   budget (`quotas.heavy_ms_per_second`: the synchronous part of its heavy calls, averaged; a call
 *   waits for its turn while the principal is over it).
 * - `wait`: holds its request open until something changes (`wait_for_*`). At most
 *   `quotas.waits_per_principal` at once; the next is QUOTA_EXCEEDED (retryable) at once.
 */
export type ToolCost = 'light' | 'heavy' | 'wait';

/** The cost shares of `deps`' master: its runtime's (src/broker/runtime.ts), made with it from `quotas`. */
export function costSharesOf(deps: Pick<BrokerDeps, 'runtime'>): CostShares {
  return deps.runtime.costs;
}

/** Sleeps `ms`, or rejects once `signal` aborts (the client went away: nothing ran). */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = () => {
      signal?.removeEventListener('abort', gone);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const gone = () => {
      clearTimeout(timer);
      reject(
        new BrokerError(
          'UNAVAILABLE',
          'the call was abandoned by its client while it waited for its time budget',
          'Nothing ran; send it again if you still want the answer.',
        ),
      );
    };
    signal?.addEventListener('abort', gone, { once: true });
  });
}

/**
 * Runs a heavy call for `principalId`: in its lane, once its time budget allows, charging the
 * event-loop time `work` reports in its meter (its synchronous parts). A call that throws is charged
 * what it ran too: a flood of refused heavy calls is no cheaper to refuse.
 */
export async function runHeavy<T>(
  deps: BrokerDeps,
  principalId: string,
  work: (meter: { ms: number }) => Promise<T>,
  signal: AbortSignal | undefined,
): Promise<T> {
  const s = costSharesOf(deps);
  return s.heavy.run(
    principalId,
    async () => {
      // Each synchronous part of a heavy call runs on a turn of its own through the TurnGate (the
      // dispatcher's parseAndRun), never in the microtasks of the request that arrived with it.
      // A loop: a call of the same principal in the other lane place may have charged in the meantime.
      for (let wait = s.budget.delay(principalId, performance.now()); wait > 0; ) {
        await pause(wait, signal);
        wait = s.budget.delay(principalId, performance.now());
      }
      const meter = { ms: 0 };
      try {
        return await work(meter);
      } finally {
        const now = performance.now();
        s.budget.charge(principalId, meter.ms, now);
        s.budget.sweep(now);
      }
    },
    signal,
  );
}
