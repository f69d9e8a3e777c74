import Database from 'better-sqlite3';
import { migrateLocalStore } from './local-store-migrations.js';

/** The open SQLite handle behind the worker's local store (better-sqlite3: every call synchronous). */
export type LocalDb = Database.Database;

/** Opens the file at `path` (`:memory:` for tests), sets the pragmas and migrates it; closes it on failure. */
export function openLocalDb(path: string): LocalDb {
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    db.pragma('busy_timeout = 5000');
    // As the master's (src/store/db.ts): a savepoint's undo and temporary sorts never become files.
    db.pragma('temp_store = MEMORY');
    migrateLocalStore(db);
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

/** Runs `fn` in one immediate transaction (nested calls become savepoints). */
export function inImmediateTransaction<T>(db: LocalDb, fn: () => T): T {
  return db.transaction(fn).immediate();
}
