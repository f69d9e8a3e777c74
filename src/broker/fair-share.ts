import { BrokerError } from '../contracts/errors.js';

/**
 * The meters of the master's per-principal fair share of heavy and waiting calls (docs/security.md "Fair share between principals"):
 * a time budget per principal, the long-polls each holds, and the turns of the event loop heavy parts
 * take. One set per master, in its runtime (src/broker/runtime.ts `costs`); the dispatcher and
 * tools/tool-cost.ts (`runHeavy`) use them.
 */

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

/**
 * Runs the synchronous parts of heavy calls one per turn of the event loop, every principal's together,
 * principals in turn, and each principal's for at most half of the loop's time (docs/security.md "Fair share between principals"). Node
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
  /** A pump queued for the next turn. */
  private immediate = false;
  /** A pump waiting for the soonest rest to end, and when it fires. */
  private timer: { handle: ReturnType<typeof setTimeout>; at: number } | null = null;

  /**
   * `now`: the monotonic clock parts are timed and rests end by (ms); a test gives one that parts advance
   * as they "run", so what it asserts does not hang on how busy the machine is.
   */
  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Runs `part` for `principalId` on a turn of its own, after its principal's rest. */
  async run<T>(principalId: string, part: () => T): Promise<T> {
    await this.next(principalId);
    const started = this.now();
    try {
      return part();
    } finally {
      this.rest(principalId, started, this.now());
    }
  }

  /**
   * Charges a part that ran from `started` to `ended` to `principalId`'s rest: its next part starts no
   * sooner than as long after `ended` (run() does it for its own part; a caller that ran a part on in the
   * same turn charges it here).
   */
  rest(principalId: string, started: number, ended: number): void {
    const until = ended + (ended - started);
    const lane = this.lanes.get(principalId);
    if (lane) lane.restUntil = Math.max(lane.restUntil, until);
    else if (until - ended >= 1)
      this.resting.set(principalId, Math.max(this.resting.get(principalId) ?? 0, until));
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
      // At once, even while a timer waits for a resting principal: this one may not be resting.
      this.pumpNextTurn();
    });
  }

  private pumpNextTurn(): void {
    if (this.immediate) return;
    this.immediate = true;
    setImmediate(() => {
      this.immediate = false;
      this.pump();
    });
  }

  /** A pump when the soonest rest ends (one timer, moved earlier when a sooner rest needs it). */
  private pumpAt(at: number, now: number): void {
    if (this.timer !== null && this.timer.at <= at) return;
    if (this.timer !== null) clearTimeout(this.timer.handle);
    const handle = setTimeout(
      () => {
        this.timer = null;
        this.pumpNextTurn();
      },
      Math.max(1, Math.ceil(at - now)),
    );
    this.timer = { handle, at };
  }

  /** Runs the first principal in turn that is not resting, or sleeps until one is. */
  private pump(): void {
    const now = this.now();
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
      if (this.lanes.size > 0) this.pumpNextTurn();
      return;
    }
    for (const [id, until] of this.resting) if (until <= now) this.resting.delete(id);
    if (this.lanes.size > 0) this.pumpAt(soonest, now);
  }
}
