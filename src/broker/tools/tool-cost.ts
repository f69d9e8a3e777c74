import { BrokerError } from '../../contracts/errors.js';
import type { BrokerDeps } from '../deps.js';
import { PrincipalShare } from './principal-share.js';

/**
 * What one call of a tool may cost the master, declared once per tool in the catalog (issue 35, item 7)
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

/**
 * A time budget per principal, as a token bucket of milliseconds: it refills at `msPerSecond` up to
 * `burstMs`; a call may start while the principal's level is above 0 and its duration is charged when
 * it ends (the level may go below 0: the next call waits until it is back above). Time is an argument.
 */
export class TimeBudget {
  private readonly levels = new Map<string, { level: number; at: number }>();

  constructor(
    readonly msPerSecond: number,
    readonly burstMs: number,
  ) {}

  /** Milliseconds `id` must wait at `now` before its next call may start (0: at once). */
  delay(id: string, now: number): number {
    const level = this.level(id, now);
    return level > 0 ? 0 : Math.ceil(((1 - level) * 1000) / this.msPerSecond);
  }

  /** Charges `ms` of work to `id` at `now`. */
  charge(id: string, ms: number, now: number): void {
    this.levels.set(id, { level: this.level(id, now) - ms, at: now });
  }

  /** Drops principals whose bucket is full again (they cost nothing to remember). */
  sweep(now: number): void {
    for (const [id] of this.levels) if (this.level(id, now) >= this.burstMs) this.levels.delete(id);
  }

  private level(id: string, now: number): number {
    const b = this.levels.get(id);
    if (!b) return this.burstMs;
    return Math.min(this.burstMs, b.level + ((now - b.at) * this.msPerSecond) / 1000);
  }
}

/** The long-polls each principal holds now. */
export class WaitCounter {
  private readonly held = new Map<string, number>();

  constructor(readonly perPrincipal: number) {}

  /** Takes a place for `id` or throws QUOTA_EXCEEDED; returns the function that gives it back. */
  take(id: string, tool: string): () => void {
    const n = this.held.get(id) ?? 0;
    if (n >= this.perPrincipal)
      throw new BrokerError(
        'QUOTA_EXCEEDED',
        `${tool}: you already hold ${n} waits at once; the cap is ${this.perPrincipal}`,
        'Wait on fewer things at once (wait_for_task on the task you need next; get_task or list_tasks for the others), or retry when one of your waits has answered.',
        { cap: 'quotas.waits_per_principal', limit: this.perPrincipal, used: n },
      );
    this.held.set(id, n + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.held.get(id) ?? 1) - 1;
      if (left > 0) this.held.set(id, left);
      else this.held.delete(id);
    };
  }

  /** Waits `id` holds now. */
  heldBy(id: string): number {
    return this.held.get(id) ?? 0;
  }
}

/** The master's per-principal costs: one set per store, as the diff share (revision-diff.ts). */
export interface CostShares {
  heavy: PrincipalShare;
  budget: TimeBudget;
  waits: WaitCounter;
  turns: TurnGate;
}

/**
 * Runs the synchronous parts of heavy calls one per turn of the event loop, every principal's together,
 * principals in turn, and each principal's for at most half of the loop's time (issue 35 item 7). Node
 * runs every immediate queued for a turn back to back, each followed by its microtasks, so heavy parts
 * that each yielded with setImmediate still ran one after another (4 × 40 ms) while other principals'
 * requests, already read, waited for the poll phase. Here each turn runs one part, queued from inside the
 * check phase (which Node defers to the next turn, after the poll phase); principals with parts waiting
 * take turns; and after a part of `d` ms its principal's next part starts no sooner than `d` ms later,
 * so a request of another principal that needs several turns (read, answer, write) finishes in that rest
 * and waits at most one part, not one per turn it needs.
 */
export class TurnGate {
  /** Principals with parts waiting, in their turn order, and when each may run its next. */
  private readonly lanes = new Map<string, { waiting: Array<() => void>; restUntil: number }>();
  /** Principals resting (none waiting) until the time given: a new part of theirs waits it out too. */
  private readonly resting = new Map<string, number>();
  private scheduled = false;

  /** Runs `part` for `principalId` on a turn of its own, after its principal's rest. */
  async run<T>(principalId: string, part: () => T): Promise<T> {
    await this.next(principalId);
    const started = performance.now();
    try {
      return part();
    } finally {
      const ended = performance.now();
      const until = ended + (ended - started);
      const lane = this.lanes.get(principalId);
      if (lane) lane.restUntil = Math.max(lane.restUntil, until);
      else if (until - ended >= 1) this.resting.set(principalId, until);
    }
  }

  /** Resolves on a turn of its own for `principalId` (FIFO within a principal). */
  next(principalId: string): Promise<void> {
    return new Promise((resolve) => {
      let lane = this.lanes.get(principalId);
      if (!lane) {
        lane = { waiting: [], restUntil: this.resting.get(principalId) ?? 0 };
        this.resting.delete(principalId);
        this.lanes.set(principalId, lane);
      }
      lane.waiting.push(resolve);
      this.schedule(setImmediate);
    });
  }

  private schedule(on: (f: () => void) => unknown): void {
    if (this.scheduled) return;
    this.scheduled = true;
    on(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  /** Runs the first principal in turn that is not resting, or sleeps until one is. */
  private pump(): void {
    const now = performance.now();
    let soonest = Number.POSITIVE_INFINITY;
    for (const [id, lane] of this.lanes) {
      if (lane.restUntil > now) {
        soonest = Math.min(soonest, lane.restUntil);
        continue;
      }
      // Its turn: to the back of the order, or out of it with its rest remembered.
      this.lanes.delete(id);
      const resolve = lane.waiting.shift() as () => void;
      if (lane.waiting.length > 0) this.lanes.set(id, lane);
      resolve();
      // The part resolved above runs in this turn's microtasks; the next is looked for in the next turn.
      if (this.lanes.size > 0) this.schedule(setImmediate);
      return;
    }
    for (const [id, until] of this.resting) if (until <= now) this.resting.delete(id);
    if (this.lanes.size > 0)
      this.schedule((f) => setTimeout(() => setImmediate(f), Math.max(1, Math.ceil(soonest - now))));
  }
}

const shares = new WeakMap<object, CostShares>();

/** The cost shares of `deps`' master, made on first use from `quotas`. */
export function costSharesOf(deps: BrokerDeps): CostShares {
  let s = shares.get(deps.store);
  if (!s) {
    const q = deps.config.quotas;
    s = {
      heavy: new PrincipalShare('heavy read', q.heavy_calls_per_principal, q.heavy_queued_per_principal),
      budget: new TimeBudget(q.heavy_ms_per_second, q.heavy_burst_ms),
      waits: new WaitCounter(q.waits_per_principal),
      turns: new TurnGate(),
    };
    shares.set(deps.store, s);
  }
  return s;
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
