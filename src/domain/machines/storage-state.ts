/**
 * The master store's ability to take writes, decided from facts the storage guard gathers
 * (src/broker/loops/storage-guard.ts). States:
 *
 *   ok          enough free space, and the last write worked
 *   low         free space under `warn_free_bytes`: a `disk_low` warning, nothing refused yet
 *   refusing    free space under `min_free_bytes`: what makes the store grow is refused (UNAVAILABLE)
 *   unwritable  a write failed with SQLITE_FULL or an I/O error, and no probe write has worked since
 *
 * `refusing` and `unwritable` make `/healthz` answer 503 and raise the critical `disk_full` alert.
 */

/** One of the states above. */
export type StorageState = 'ok' | 'low' | 'refusing' | 'unwritable';

/** What the decision reads. */
export interface StorageFacts {
  /** Free bytes available to the master on the data dir's filesystem; null when statfs failed. */
  free_bytes: number | null;
  /** The last store write failure not yet cleared by a successful probe; null when none. */
  write_failure: string | null;
}

/** Thresholds from the master config (`storage.warn_free_bytes`, `storage.min_free_bytes`). */
export interface StorageThresholds {
  warn_free_bytes: number;
  min_free_bytes: number;
}

/** The state for these facts; an unknown free space (statfs failed) counts as enough. */
export function storageState(facts: StorageFacts, limits: StorageThresholds): StorageState {
  if (facts.write_failure !== null) return 'unwritable';
  if (facts.free_bytes === null) return 'ok';
  if (facts.free_bytes < limits.min_free_bytes) return 'refusing';
  if (facts.free_bytes < Math.max(limits.warn_free_bytes, limits.min_free_bytes)) return 'low';
  return 'ok';
}

/** Whether the store takes writes that make it grow in this state. */
export function storageAcceptsGrowth(state: StorageState): boolean {
  return state === 'ok' || state === 'low';
}

/** What a write that grows the store asks before it starts (reserved, not sampled). */
export interface GrowthRequest {
  /** Free bytes at the last sample; null when statfs failed (counts as enough). */
  free_bytes: number | null;
  /** Bytes already promised to writes in flight (uploads streaming, not yet stored). */
  reserved_bytes: number;
  /** Bytes this write declares it will add. */
  bytes: number;
}

/**
 * Whether `bytes` more fit above the floor once every write in flight has landed: free − reserved −
 * bytes ≥ `min_free_bytes`. A floor of 0 turns the check off, as it turns the refusal off.
 */
export function growthFits(req: GrowthRequest, limits: StorageThresholds): boolean {
  if (req.free_bytes === null || limits.min_free_bytes === 0) return true;
  return req.free_bytes - req.reserved_bytes - req.bytes >= limits.min_free_bytes;
}
