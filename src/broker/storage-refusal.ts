import type { BrokerError } from '../contracts/errors.js';
import { asStorageUnavailable } from '../store/storage-errors.js';

/**
 * What every edge answers while the store cannot write (out of disk space, a failing disk; ADR 0016): the store's mapping (src/store/storage-errors.ts), offered here so that the edges
 * (HTTP's error handler, the worker gateway's ingest) never import src/store/.
 */

/**
 * `err` as the retryable UNAVAILABLE the master answers while it cannot store, or null for any other
 * error. An UNAVAILABLE BrokerError is itself; a raw SQLite write failure for space (one that escaped a
 * store transaction, which would have reported it itself) is told to `onWriteFailure` with its detail,
 * so the storage guard flips all the same.
 */
export function storageRefusal(err: unknown, onWriteFailure: (detail: string) => void): BrokerError | null {
  return asStorageUnavailable(err, { onWriteFailure });
}
