import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { packageRoot } from '../../src/platform/package-root.js';

/**
 * The worker's local-store migrations (ADR 0014): numbered files `worker/store/migrations/NNN-name.sql`, read
 * from the package root like the master's (src/store/db.ts), so the same code works from `worker/` under
 * vitest and from `dist/worker/` after a build. File NNN takes the store from `PRAGMA user_version`
 * NNN - 1 to NNN, in one immediate transaction. A shipped file is never edited: its digest is pinned by
 * test/unit/worker/local-store-schema.test.ts, and worker/store/schema.sql is the snapshot the files produce
 * (`npm run schema:dump`).
 */

/** The schema version this code writes: the number of the last migration file it ships with. */
export const LOCAL_STORE_SCHEMA_VERSION = 7;

/** The folder of the worker's numbered migrations. */
export function localStoreMigrationsDir(): string {
  return join(packageRoot(), 'worker', 'store', 'migrations');
}

/** The migration files in `dir`, in order; fails when they are not exactly 001 … LOCAL_STORE_SCHEMA_VERSION. */
export function localStoreMigrationFiles(dir: string = localStoreMigrationsDir()): string[] {
  const files = readdirSync(dir)
    .filter((f) => /^\d{3}-[a-z0-9-]+\.sql$/.test(f))
    .sort();
  const numbers = files.map((f) => Number(f.slice(0, 3)));
  const expected = Array.from({ length: LOCAL_STORE_SCHEMA_VERSION }, (_, i) => i + 1);
  // A partial install (a file lost in packaging) must stop the worker, not leave it half migrated.
  if (numbers.join(',') !== expected.join(','))
    throw new Error(
      `worker migrations in ${dir} are ${numbers.join(', ') || 'missing'}; this worker needs 1 to ${LOCAL_STORE_SCHEMA_VERSION}: reinstall it`,
    );
  return files;
}

/** Applies every migration above the file's `user_version`; refuses a file written by a newer worker. */
export function migrateLocalStore(db: Database.Database): void {
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version > LOCAL_STORE_SCHEMA_VERSION) {
    throw new Error(
      `local store schema version ${version} is newer than this worker understands (${LOCAL_STORE_SCHEMA_VERSION}); upgrade the worker`,
    );
  }
  const files = localStoreMigrationFiles();
  for (let v = version; v < files.length; v++) {
    const sql = readFileSync(join(localStoreMigrationsDir(), files[v]!), 'utf8');
    db.transaction(() => {
      db.exec(sql);
      db.pragma(`user_version = ${v + 1}`);
    }).immediate();
  }
}
