import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../src/contracts/worker-protocol.js';
import {
  EXECUTION_TABLE,
  type ExecutionPhase,
  type ReportedPhase,
} from '../../../src/domain/machines/execution.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { dumpSchema } from '../../../src/store/db.js';
import { openLocalStore } from '../../../worker/store/local-store.js';
import {
  LOCAL_STORE_SCHEMA_VERSION,
  localStoreMigrationFiles,
  localStoreMigrationsDir,
  migrateLocalStore,
} from '../../../worker/store/local-store-migrations.js';
import { makePlan } from '../../support/executor-plan.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * The worker's migrations are files (worker/store/migrations, ADR 0014), with a committed snapshot
 * (worker/store/schema.sql, `npm run schema:dump`) like the master's. A worker upgraded from the release that
 * kept its migrations inline must open its existing file unchanged.
 */

afterAll(() => removeTempDirs());

/**
 * The inline migrations of worker/store/local-store.ts before they moved to files, copied verbatim: the
 * fixture that stands for every store file already out there. Never edit.
 */
const OLD_INLINE_MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE card_epochs (
    card_index INTEGER PRIMARY KEY CHECK (card_index >= 0),
    epoch INTEGER NOT NULL CHECK (epoch >= 1)
  );
  CREATE TABLE executions (
    execution_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    lease_epoch INTEGER NOT NULL CHECK (lease_epoch >= 1),
    phase TEXT NOT NULL
      CHECK (phase IN ('accepted', 'rejected', 'started', 'exited', 'cleaned', 'cleanup_failed')),
    plan_json TEXT NOT NULL,
    result_json TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE INDEX executions_unfinished ON executions (created_at)
    WHERE phase NOT IN ('rejected', 'cleaned', 'cleanup_failed');
  CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    boot_id TEXT NOT NULL,
    seq INTEGER NOT NULL CHECK (seq >= 1),
    message_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    acked_at INTEGER,
    UNIQUE (boot_id, seq)
  );
  CREATE INDEX outbox_unacked ON outbox (id) WHERE acked_at IS NULL;
  CREATE TABLE outbox_seqs (
    boot_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL CHECK (last_seq >= 0)
  );
  CREATE TABLE master_marks (
    boot_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL CHECK (seq >= 0),
    updated_at INTEGER NOT NULL
  );
  `,
  `
  ALTER TABLE executions ADD COLUMN pgid INTEGER CHECK (pgid IS NULL OR pgid > 1);
  -- The message's type, so superseding old samples need not parse every queued message's JSON.
  ALTER TABLE outbox ADD COLUMN kind TEXT;
  `,
  `
  -- When the execution's directory was deleted by retention (docs/operations.md "Audit retention"), so it is not listed again.
  ALTER TABLE executions ADD COLUMN dir_pruned_at INTEGER;
  `,
];

/** sha256 of each shipped migration file: a shipped migration is never edited again (add a file). */
const SHIPPED: Record<string, string> = {
  '001-initial.sql': 'b5924a32e28d388f5cf4e4a3dc0f7767835dfa255d4d2fff0363d42e2e549c13',
  '002-pgid-outbox-kind.sql': '5d4c42abfa68498529748ccbf8edc8dbdf93f678417124f2ab317463d86d5561',
  '003-dir-pruned-at.sql': '1857de0ffa51ee3cfafecf4f15587496ee38e734f470a596eed4a78e7d686655',
  '004-phase-moves.sql': '9e2c3e93c466683f9231f210aa688ccdd0df4fa41e4bccd64899af1a623a2e7d',
  '005-slurm-job.sql': 'c88e8fbc89947baef1784df090a8bfb552668a8c539941efbf4039c6c7aadaa3',
  '006-log-queue.sql': '3dd5b8b5181212d83f9c6f61250ba0fed4bc2ffbd2d4198889f818d79bed9a3e',
  '007-pgid-identity.sql': 'a5952158656a9aad9b52740afa718058356b714fbdd3c2bc506fb41246b28407',
};

/** The tables and indexes of a dump (triggers left out): what the old inline migrations defined. */
const tablesOf = (dump: string) =>
  dump
    .split('\n\n')
    .map((stmt) => stmt.trim())
    .filter((stmt) => stmt !== '' && !stmt.startsWith('CREATE TRIGGER') && !stmt.startsWith('-- generated'));

const PLAN: ExecutionPlan = {
  ...makePlan({ executionId: 'ex_old', argv: ['/usr/bin/true'], epoch: 4 }),
  task_id: 'task_old',
  assignment_id: 'asg_old',
};

function freshSchema(): string {
  const db = new Database(':memory:');
  try {
    migrateLocalStore(db);
    return dumpSchema(db);
  } finally {
    db.close();
  }
}

/** A store file as the old worker left it at `version`, holding one execution and one queued message. */
function oldStoreFile(version: number): string {
  const path = join(makeTempDir('old-worker-store'), 'worker.sqlite');
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  for (let v = 0; v < version; v++) {
    db.exec(OLD_INLINE_MIGRATIONS[v]!);
    db.pragma(`user_version = ${v + 1}`);
  }
  db.prepare(
    `INSERT INTO executions (execution_id, task_id, lease_epoch, phase, plan_json, created_at, updated_at)
     VALUES ('ex_old', 'task_old', 4, 'started', ?, 10, 20)`,
  ).run(JSON.stringify(PLAN));
  db.prepare(
    "INSERT INTO outbox (boot_id, seq, message_json, created_at) VALUES ('boot_old', 1, '{}', 30)",
  ).run();
  db.prepare('INSERT INTO card_epochs (card_index, epoch) VALUES (0, 4)').run();
  db.close();
  return path;
}

describe('worker local-store schema', () => {
  it('worker/store/schema.sql matches the migrated store (run `npm run schema:dump` if not)', () => {
    expect(freshSchema()).toBe(readFileSync(join(packageRoot(), 'worker', 'store', 'schema.sql'), 'utf8'));
  });

  it('migrations are 001 … N without gaps, N is the version the code writes, and none was edited', () => {
    const files = localStoreMigrationFiles();
    expect(files.length).toBe(LOCAL_STORE_SCHEMA_VERSION);
    for (const [i, f] of files.entries())
      expect(f).toMatch(new RegExp(`^${String(i + 1).padStart(3, '0')}-[a-z0-9-]+\\.sql$`));
    for (const [file, digest] of Object.entries(SHIPPED)) {
      const bytes = readFileSync(join(localStoreMigrationsDir(), file));
      expect(createHash('sha256').update(bytes).digest('hex'), `${file} was edited after shipping`).toBe(
        digest,
      );
    }
  });

  it('a partial install (a migration file missing, or one too many) is refused, not half applied', () => {
    for (const names of [
      ['001-initial.sql', '002-pgid-outbox-kind.sql', '004-phase-moves.sql'],
      ['001-initial.sql', '002-pgid-outbox-kind.sql', '003-dir-pruned-at.sql'],
      [...Object.keys(SHIPPED), '006-from-the-future.sql'],
      [],
    ]) {
      const dir = makeTempDir('partial-migrations');
      for (const n of names) writeFileSync(join(dir, n), '-- placeholder\n');
      expect(() => localStoreMigrationFiles(dir), names.join(' ')).toThrow(/reinstall it/);
    }
  });

  it('the built worker (dist/, `npm run build`) reads the same files, with no copy step', async () => {
    const built = (await import(
      pathToFileURL(join(packageRoot(), 'dist', 'worker', 'store', 'local-store-migrations.js')).href
    )) as typeof import('../../../worker/store/local-store-migrations.js');
    expect(built.localStoreMigrationsDir()).toBe(localStoreMigrationsDir());
    const db = new Database(':memory:');
    try {
      built.migrateLocalStore(db);
      expect(dumpSchema(db)).toBe(freshSchema());
    } finally {
      db.close();
    }
  });

  it('files 001-003 build exactly the schema the old inline migrations built', () => {
    const fromFiles = new Database(':memory:');
    const fromInline = new Database(':memory:');
    try {
      for (const f of localStoreMigrationFiles().slice(0, 3))
        fromFiles.exec(readFileSync(join(localStoreMigrationsDir(), f), 'utf8'));
      for (const sql of OLD_INLINE_MIGRATIONS) fromInline.exec(sql);
      expect(OLD_INLINE_MIGRATIONS.length).toBe(3);
      expect(dumpSchema(fromFiles)).toBe(dumpSchema(fromInline));
    } finally {
      fromFiles.close();
      fromInline.close();
    }
  });

  it('a store at the old version 3 opens with its tables and rows unchanged; only 004 and later are applied', () => {
    const path = oldStoreFile(3);
    // The tables the old file had, plus the column 005 adds, the log queue of 006 and the columns of 007
    // (004 adds triggers only).
    const before = new Database(':memory:');
    for (const sql of OLD_INLINE_MIGRATIONS) before.exec(sql);
    for (const f of ['005-slurm-job.sql', '006-log-queue.sql', '007-pgid-identity.sql'])
      before.exec(readFileSync(join(localStoreMigrationsDir(), f), 'utf8'));
    const schema = dumpSchema(before);
    before.close();
    const store = openLocalStore(path);
    try {
      expect(store.getExecution('ex_old')).toMatchObject({ phase: 'started', plan: PLAN, updated_at: 20 });
      expect(store.getCardEpoch(0)).toBe(4);
      expect(store.listUnackedOutbox().map((e) => [e.boot_id, e.seq])).toEqual([['boot_old', 1]]);
      // The old record moves on through the table like any other.
      expect(store.moveExecution('ex_old', 'started', 'exited').phase).toBe('exited');
    } finally {
      store.close();
    }
    const after = new Database(path);
    try {
      expect(tablesOf(dumpSchema(after))).toEqual(tablesOf(schema));
      expect(dumpSchema(after)).toBe(freshSchema());
      expect(after.pragma('user_version', { simple: true })).toBe(LOCAL_STORE_SCHEMA_VERSION);
      expect(after.prepare('SELECT phase FROM executions').all()).toEqual([{ phase: 'exited' }]);
    } finally {
      after.close();
    }
  });

  it('the database refuses the phase moves EXECUTION_TABLE does not list (004), and allows the others', () => {
    const reported = (Object.keys(EXECUTION_TABLE) as ExecutionPhase[]).filter(
      (p): p is ReportedPhase => p !== 'assigned',
    );
    const pathTo = (p: ReportedPhase): ReportedPhase[] =>
      p === 'rejected' || p === 'accepted'
        ? [p]
        : [...pathTo(p === 'started' ? 'accepted' : p === 'exited' ? 'started' : 'exited'), p];
    const db = new Database(':memory:');
    try {
      migrateLocalStore(db);
      const insert = db.prepare(
        `INSERT INTO executions (execution_id, task_id, lease_epoch, phase, plan_json, created_at, updated_at)
         VALUES (?, 't', 1, ?, '{}', 1, 1)`,
      );
      const update = db.prepare('UPDATE executions SET phase = ? WHERE execution_id = ?');
      for (const first of reported)
        if (first === 'accepted' || first === 'rejected')
          expect(() => insert.run(`ok-${first}`, first)).not.toThrow();
        else
          expect(() => insert.run(`bad-${first}`, first), first).toThrow(
            /first recorded accepted or rejected/,
          );
      for (const from of reported)
        for (const to of reported) {
          if (from === to) continue;
          const id = `${from}-${to}`;
          const [first, ...rest] = pathTo(from);
          insert.run(id, first);
          for (const p of rest) update.run(p, id);
          const legal = EXECUTION_TABLE[from][to] === to;
          if (legal) expect(() => update.run(to, id), `${from} → ${to}`).not.toThrow();
          else expect(() => update.run(to, id), `${from} → ${to}`).toThrow(/not in the execution table/);
        }
    } finally {
      db.close();
    }
  });

  for (const version of [1, 2])
    it(`a store left at the old version ${version} is migrated to today's schema, keeping its rows`, () => {
      const path = oldStoreFile(version);
      const store = openLocalStore(path);
      expect(store.getCardEpoch(0)).toBe(4);
      store.close();
      const db = new Database(path);
      try {
        expect(dumpSchema(db)).toBe(freshSchema());
        expect(db.prepare('SELECT execution_id, pgid, dir_pruned_at FROM executions').all()).toEqual([
          { execution_id: 'ex_old', pgid: null, dir_pruned_at: null },
        ]);
      } finally {
        db.close();
      }
    });
});
