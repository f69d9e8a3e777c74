/**
 * Waiting for a condition with a bound, never for a fixed time (timing bounds live in npm run bench, docs/performance.md). The predicate is
 * polled; the first truthy value it returns is the result. On timeout the error names what was awaited
 * and the last value or error seen, so a failing test says why. This is the only `waitFor` in the tests
 * (ADR 0020): pass `{ timeoutMs, what }` rather than writing another.
 */

/** Options of {@link waitFor}. */
export interface WaitForOptions {
  /** Upper bound, default 10 s. */
  timeoutMs?: number;
  /** Pause between polls, default 20 ms. */
  intervalMs?: number;
  /** What is awaited, for the timeout message. */
  what?: string;
}

/** Polls `predicate` until it returns a truthy value (which is returned) or `timeoutMs` passes. */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  opts: WaitForOptions | number = {},
): Promise<NonNullable<T>> {
  const o = typeof opts === 'number' ? { timeoutMs: opts } : opts;
  const timeoutMs = o.timeoutMs ?? 10_000;
  const intervalMs = o.intervalMs ?? 20;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value as NonNullable<T>;
      last = value;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      const seen = last instanceof Error ? `${last.name}: ${last.message}` : JSON.stringify(last);
      throw new Error(`waitFor timed out after ${timeoutMs} ms: ${o.what ?? 'condition'} (last: ${seen})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
