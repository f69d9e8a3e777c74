import { BrokerError } from '../contracts/errors.js';

/**
 * SQLite failures that mean "the disk (or the database's size limit) cannot take this write", as
 * opposed to a bug or a constraint: SQLITE_FULL (no space, or `max_page_count` reached) and the
 * SQLITE_IOERR family (a write or fsync failed). They are not the caller's fault and may pass once space
 * is freed, so every edge answers them as a retryable `UNAVAILABLE`, never `INTERNAL` (ADR 0016).
 */

/** The SQLite error code of `err` (better-sqlite3's SqliteError carries it as `code`), or null. */
function sqliteCode(err: unknown): string | null {
  if (typeof err !== 'object' || err === null) return null;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && code.startsWith('SQLITE_') ? code : null;
}

/** Whether `err` is a SQLite write failure for lack of space or a failing disk. */
export function isStorageWriteError(err: unknown): boolean {
  const code = sqliteCode(err);
  return code !== null && (code === 'SQLITE_FULL' || code.startsWith('SQLITE_IOERR'));
}

/** The retryable error every edge answers while the store cannot write. */
export function storageUnavailable(detail: string): BrokerError {
  return new BrokerError(
    'UNAVAILABLE',
    `the master cannot store this now: ${detail}`,
    'Retry later: the master is out of disk space (or its disk is failing) and refuses writes until an operator frees space; /healthz says why.',
    { reason: 'storage_unavailable' },
  );
}

/** A short description of a storage write failure, for logs, alerts and /healthz. */
export function describeStorageError(err: unknown): string {
  const code = sqliteCode(err) ?? 'error';
  const message = err instanceof Error ? err.message : String(err);
  return `${code}: ${message}`.slice(0, 300);
}

/**
 * `err` as the UNAVAILABLE the store cannot take a write with, or null for any other error. A raw
 * SQLITE_FULL from a write outside a transaction (which would have reported it itself) is reported to
 * the store's failure hook here, so the storage guard flips all the same.
 */
export function asStorageUnavailable(
  err: unknown,
  store?: { onWriteFailure(detail: string): void },
): BrokerError | null {
  if (err instanceof BrokerError) return err.code === 'UNAVAILABLE' ? err : null;
  if (!isStorageWriteError(err)) return null;
  const detail = describeStorageError(err);
  store?.onWriteFailure(detail);
  return storageUnavailable(detail);
}
