import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../platform/package-root.js';
import { dumpSchema, openDb } from './db.js';

/**
 * `npm run schema:dump`: migrates an empty in-memory database and writes its schema to
 * src/store/schema.sql. The file is committed so every schema change shows in review
 * (test/unit/store/schema.test.ts fails while it is stale).
 */
function main(): void {
  const db = openDb(':memory:');
  try {
    const path = join(packageRoot(), 'src', 'store', 'schema.sql');
    writeFileSync(path, dumpSchema(db));
    console.log(`wrote ${path}`);
  } finally {
    db.close();
  }
}

main();
