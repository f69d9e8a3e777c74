import { monotonicFactory } from 'ulid';

/** Makes a new id with a type prefix, e.g. `prop_01J…`. Ids sort by creation time. */
export type IdGenerator = (prefix: string) => string;

/**
 * One monotonic ulid factory for the process: `ulid()` re-detects its PRNG on every call (about 34 µs),
 * which halves single-row commit throughput; the factory is ~100× faster and orders ids within a ms.
 */
export function createIdGenerator(): IdGenerator {
  const next = monotonicFactory();
  return (prefix) => `${prefix}_${next()}`;
}
