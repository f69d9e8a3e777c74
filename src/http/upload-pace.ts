/**
 * A per-principal byte rate for upload bodies (one agent's uploads must not slow everyone
 * else's requests). Every `PUT /api/v1/blobs` body streams through the master's event loop (TLS, the
 * hash, the temporary file), so a token sending as fast as loopback allows takes as much of the loop as
 * it likes. Each principal gets a token bucket of `bytesPerSecond`, shared by all its uploads in flight,
 * holding at most one second's worth: a body past its share is paused (its socket is not read, so TCP
 * slows the sender) for as long as the bucket needs to refill. Nothing is buffered beyond the piece in
 * hand. Pure but for the clock the caller passes in.
 */

/** Waits shorter than this are not worth a timer: the bucket lets the piece through and owes it. */
const MIN_WAIT_MS = 5;

interface Bucket {
  /** Bytes the principal may still send now; negative while it owes. */
  tokens: number;
  /** When `tokens` was last brought up to date (ms). */
  at: number;
}

/** The buckets of all principals. */
export class UploadPace {
  private readonly buckets = new Map<string, Bucket>();

  /** `bytesPerSecond` 0 turns pacing off. */
  constructor(private readonly bytesPerSecond: number) {}

  /**
   * Takes `bytes` from `principalId`'s bucket at time `now` (ms); returns how long to wait before
   * passing them on (0: at once).
   */
  take(principalId: string, bytes: number, now: number): number {
    const rate = this.bytesPerSecond;
    if (rate <= 0) return 0;
    const b = this.buckets.get(principalId) ?? { tokens: rate, at: now };
    b.tokens = Math.min(rate, b.tokens + ((now - b.at) * rate) / 1000);
    b.at = now;
    b.tokens -= bytes;
    this.buckets.set(principalId, b);
    if (b.tokens >= 0) return 0;
    const wait = Math.ceil((-b.tokens * 1000) / rate);
    return wait < MIN_WAIT_MS ? 0 : wait;
  }

  /** Forgets buckets that have refilled by `now` (they would start full anyway); returns how many remain. */
  sweep(now: number): number {
    const rate = this.bytesPerSecond;
    for (const [id, b] of this.buckets)
      if (b.tokens + ((now - b.at) * rate) / 1000 >= rate) this.buckets.delete(id);
    return this.buckets.size;
  }
}
