import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';
import { dumpSchema, migrationsDir, openDb } from '../../../src/store/db.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * The committed schema snapshot (src/store/schema.sql) is what the migrations produce, so every schema
 * change shows up in review as a diff of that file. Regenerate it with `npm run schema:dump`.
 */

afterAll(() => removeTempDirs());

const migrationFiles = () =>
  readdirSync(migrationsDir())
    .filter((f) => f.endsWith('.sql'))
    .sort();

describe('schema', () => {
  it('src/store/schema.sql matches the migrated database (run `npm run schema:dump` if not)', () => {
    const db = openDb(':memory:');
    try {
      const committed = readFileSync(join(packageRoot(), 'src', 'store', 'schema.sql'), 'utf8');
      expect(dumpSchema(db)).toBe(committed);
    } finally {
      db.close();
    }
  });

  it('a database file opens in WAL mode with the checkpoint every 10,000 pages and the WAL file bounded', () => {
    const db = openDb(join(makeTempDir('db-pragmas'), 'broker.db'));
    try {
      expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
      expect(db.pragma('synchronous', { simple: true })).toBe(1); // NORMAL
      expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(10_000);
      expect(db.pragma('journal_size_limit', { simple: true })).toBe(64 * 1024 * 1024);
    } finally {
      db.close();
    }
  });

  it('migrations are numbered 001, 002, … without gaps; user_version ends at the last one', () => {
    const files = migrationFiles();
    expect(files.length).toBeGreaterThan(0);
    for (const [i, f] of files.entries())
      expect(f).toMatch(new RegExp(`^${String(i + 1).padStart(3, '0')}-[a-z0-9-]+\\.sql$`));
    const db = openDb(':memory:');
    try {
      expect(db.pragma('user_version', { simple: true })).toBe(files.length);
    } finally {
      db.close();
    }
  });

  it('reopening a migrated file changes nothing and keeps WAL, foreign keys and the data', () => {
    const path = join(makeTempDir('schema'), 'broker.db');
    const first = openDb(path);
    const schema = dumpSchema(first);
    first
      .prepare(
        "INSERT INTO principals (id, name, roles, token_hash, created_at) VALUES ('prin_1', 'a', '[\"viewer\"]', ?, 1)",
      )
      .run('a'.repeat(64));
    first.close();
    const again = openDb(path);
    try {
      expect(dumpSchema(again)).toBe(schema);
      expect(again.pragma('journal_mode', { simple: true })).toBe('wal');
      expect(again.pragma('foreign_keys', { simple: true })).toBe(1);
      expect(again.prepare('SELECT count(*) AS n FROM principals').get()).toEqual({ n: 1 });
    } finally {
      again.close();
    }
  });

  it('the database itself refuses states and shapes the domain forbids', () => {
    const db = openDb(':memory:');
    try {
      db.prepare(
        "INSERT INTO principals (id, name, roles, token_hash, created_at) VALUES ('prin_1', 'a', '[\"submitter\"]', ?, 1)",
      ).run('b'.repeat(64));
      const insert = (state: string, taskId: string | null, expiresAt: number | null) =>
        db
          .prepare(
            `INSERT INTO proposals (id, owner_id, state, current_revision_id, task_id, created_at, updated_at, expires_at)
             VALUES (?, 'prin_1', ?, 'rev_1', ?, 1, 1, ?)`,
          )
          .run(`prop_${state}_${taskId}_${expiresAt}`, state, taskId, expiresAt);
      expect(() => insert('BOGUS', null, 5)).toThrow(/CHECK/);
      expect(() => insert('APPROVED', null, null)).toThrow(/CHECK/); // approved points at its task
      expect(() => insert('DRAFT', 'task_1', 5)).toThrow(/CHECK/); // only approved has a task
      expect(() => insert('REJECTED', null, 5)).toThrow(/CHECK/); // terminal states do not expire
      expect(() => insert('DRAFT', null, null)).toThrow(/CHECK/); // live states do
      expect(() => insert('DRAFT', null, 5)).not.toThrow();
      expect(() =>
        db
          .prepare(
            `INSERT INTO proposals (id, owner_id, state, current_revision_id, created_at, updated_at, expires_at)
             VALUES ('prop_x', 'prin_nobody', 'DRAFT', 'rev_1', 1, 1, 5)`,
          )
          .run(),
      ).toThrow(/FOREIGN KEY/);

      // Revisions are immutable; only confirmed_at may be set.
      db.prepare(
        `INSERT INTO revisions (id, proposal_id, number, spec, digest, findings, created_by, created_at)
         VALUES ('rev_1', 'prop_DRAFT_null_5', 1, '{}', ?, '[]', 'prin_1', 1)`,
      ).run('c'.repeat(64));
      expect(() => db.prepare(`UPDATE revisions SET spec = '{"x":1}' WHERE id = 'rev_1'`).run()).toThrow(
        /revisions are immutable/,
      );
      expect(() =>
        db.prepare(`UPDATE revisions SET digest = ? WHERE id = 'rev_1'`).run('d'.repeat(64)),
      ).toThrow(/revisions are immutable/);
      expect(db.prepare(`UPDATE revisions SET confirmed_at = 2 WHERE id = 'rev_1'`).run().changes).toBe(1);
      expect(() => db.prepare(`UPDATE revisions SET confirmed_at = 3 WHERE id = 'rev_1'`).run()).toThrow(
        /a revision is confirmed once/,
      );
    } finally {
      db.close();
    }
  });
});
