import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { packageRoot } from '../../src/platform/package-root.js';
import { dumpSchema } from '../../src/store/db.js';
import { migrateLocalStore } from './local-store-migrations.js';

/**
 * `npm run schema:dump` (second half): migrates an empty in-memory worker store and writes its schema
 * to worker/store/schema.sql. Committed so every change to the worker's schema shows in review
 * (test/unit/worker/local-store-schema.test.ts fails while it is stale).
 */
function main(): void {
  const db = new Database(':memory:');
  try {
    migrateLocalStore(db);
    const path = join(packageRoot(), 'worker', 'store', 'schema.sql');
    writeFileSync(path, dumpSchema(db));
    console.log(`wrote ${path}`);
  } finally {
    db.close();
  }
}

main();
