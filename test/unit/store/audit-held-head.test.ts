import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canonicalJson } from '../../../src/contracts/canonical-json.js';
import { type AuditInput, AuditRepo, auditHash, GENESIS_HASH } from '../../../src/store/audit-repo.js';
import { Store } from '../../../src/store/store.js';
import { statementCalls } from '../../support/statement-calls.js';

/**
 * The audit chain's head is read once per transaction (a report's moves append two to four rows): it is
 * held only while the store's transaction is open, and dropped when any part of it rolls back, so the
 * chain stays one line whatever commits, rolls back or is written by another connection in between.
 */

let store: Store;
const row = (i: number): AuditInput => ({
  at: 1_000 + i,
  actor: 'a',
  action: 'worker.connected',
  subject_type: 'thing',
  subject_id: `t${i}`,
  data: { i, nested: { b: 2, a: 1 } },
});

beforeEach(() => {
  store = Store.open(':memory:');
});
afterEach(() => store.close());

/** Counts the head reads (`SELECT seq, hash … LIMIT 1`) that `fn` makes. */
function headReads(fn: () => void): number {
  return statementCalls(store.audit, 'headStmt', 'get', fn);
}

/**
 * Appends rows 1 and 3 in one store transaction, and row 2 between them in a part that rolls back
 * through `rollBack` (a store savepoint, or one the store does not see); the chain must be 1 → 3.
 */
function rowInRolledBackPart(rollBack: (inner: () => void) => void): void {
  store.transaction(() => {
    store.audit.append(row(1));
    try {
      rollBack(() => {
        store.audit.append(row(2));
        throw new Error('inner part refused');
      });
    } catch {
      // the outer part goes on
    }
    store.audit.append(row(3));
  });
  const seqs = store.db.prepare('SELECT seq, subject_id FROM audit_events ORDER BY seq').all();
  expect(seqs).toEqual([
    { seq: 1, subject_id: 't1' },
    { seq: 2, subject_id: 't3' },
  ]);
  expect(store.audit.verify()).toMatchObject({ ok: true, events: 2 });
}

describe('audit head held within a transaction', () => {
  it('reads the head once for several appends in one transaction, and again in the next', () => {
    expect(
      headReads(() =>
        store.transaction(() => {
          for (const i of [1, 2, 3, 4]) store.audit.append(row(i));
        }),
      ),
    ).toBe(1);
    expect(headReads(() => store.transaction(() => store.audit.append(row(5))))).toBe(1);
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 5 });
  });

  it('reads the head on every append made outside a store transaction', () => {
    expect(
      headReads(() => {
        for (const i of [1, 2]) store.audit.append(row(i));
      }),
    ).toBe(2);
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 2 });
  });

  it('forgets a head appended by a savepoint that rolled back; the chain has no gap', () => {
    rowInRolledBackPart((inner) => store.transaction(inner));
  });

  it('does not link to a row a raw db.transaction savepoint rolled back inside a store transaction', () => {
    // better-sqlite3's own wrapper: a savepoint the store does not see roll back
    rowInRolledBackPart((inner) => store.db.transaction(inner)());
  });

  it('does not link to rows of a transaction SQLite rolled back under the store while the caller went on', () => {
    store.transaction(() => store.audit.append(row(1)));
    // SQLITE_FULL / IOERR may roll the whole transaction back; a caller that catches the error goes on
    // in autocommit (the store's COMMIT then fails). Stood in for by a ROLLBACK the store does not see.
    expect(() =>
      store.transaction(() => {
        store.audit.append(row(2));
        store.db.exec('ROLLBACK');
        store.audit.append(row(3));
      }),
    ).toThrow(/no transaction is active/);
    store.transaction(() => store.audit.append(row(4)));
    const seqs = store.db.prepare('SELECT seq, subject_id FROM audit_events ORDER BY seq').all();
    expect(seqs).toEqual([
      { seq: 1, subject_id: 't1' },
      { seq: 2, subject_id: 't3' },
      { seq: 3, subject_id: 't4' },
    ]);
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 3 });
  });

  it('goes on (no UNIQUE failure, no fork) after another repo on the same connection appended in the transaction', () => {
    const other = new AuditRepo(store.db);
    store.transaction(() => {
      store.audit.append(row(1));
      other.append(row(2));
      store.audit.append(row(3));
    });
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 3 });
  });

  it('forgets the head of a rolled-back transaction', () => {
    store.transaction(() => store.audit.append(row(1)));
    expect(() =>
      store.transaction(() => {
        store.audit.append(row(2));
        throw new Error('refused');
      }),
    ).toThrow('refused');
    store.transaction(() => store.audit.append(row(3)));
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 2 });
  });

  it('follows rows another connection appended between two transactions', () => {
    const file = join(tmpdir(), `audit-held-${process.pid}-${Date.now()}.db`);
    const a = Store.open(file);
    const b = Store.open(file);
    try {
      a.transaction(() => a.audit.append(row(1)));
      b.transaction(() => b.audit.append(row(2)));
      a.transaction(() => {
        for (const i of [3, 4]) a.audit.append(row(i));
      });
      expect(a.audit.verify()).toMatchObject({ ok: true, events: 4 });
    } finally {
      a.close();
      b.close();
      for (const f of [file, `${file}-wal`, `${file}-shm`]) rmSync(f, { force: true });
    }
  });

  it('hashes the same with the data serialised once as with the whole event serialised', () => {
    const e = { seq: 7, at: 1, actor: 'a', action: 'x', subject_type: 's', subject_id: 'i' };
    for (const data of [{}, { b: [1, { d: 'x', c: null }], a: 'é\n"' }, { n: 1.5e-7 }]) {
      expect(auditHash(GENESIS_HASH, { ...e, data }, canonicalJson(data))).toBe(
        auditHash(GENESIS_HASH, { ...e, data }),
      );
    }
  });
});
