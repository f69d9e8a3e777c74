import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { auditHash, GENESIS_HASH } from '../../../src/store/audit-repo.js';
import { Store } from '../../../src/store/store.js';

/** The hash-chained audit log: appends link to the previous row, and verify names the first bad row. */

let store: Store;

function appendN(n: number): void {
  for (let i = 1; i <= n; i++)
    store.transaction(() =>
      store.audit.append({
        at: 1_000 + i,
        actor: `actor-${i}`,
        action: 'worker.connected',
        subject_type: 'thing',
        subject_id: `t${i % 2}`,
        data: { i, nested: { b: 2, a: 1 } },
      }),
    );
}

/** Drops the append-only triggers, as an intruder with write access to the file would. */
function dropTriggers(): void {
  store.db.exec(
    'DROP TRIGGER audit_events_append_only_update; DROP TRIGGER audit_events_append_only_delete;',
  );
}

beforeEach(() => {
  store = Store.open(':memory:');
});

afterEach(() => {
  store.close();
});

describe('audit chain', () => {
  it('starts from the genesis hash and links every row to the one before', () => {
    appendN(5);
    const rows = store.db
      .prepare('SELECT seq, prev_hash, hash FROM audit_events ORDER BY seq')
      .all() as Array<{
      seq: number;
      prev_hash: string;
      hash: string;
    }>;
    expect(rows.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(rows[0]?.prev_hash).toBe(GENESIS_HASH);
    for (let i = 1; i < rows.length; i++) expect(rows[i]?.prev_hash).toBe(rows[i - 1]?.hash);
    expect(store.audit.verify()).toEqual({ ok: true, events: 5, head: rows[4]?.hash });
  });

  it('hashes canonical JSON: key order in data does not matter, any field change does', () => {
    const e = { seq: 1, at: 1, actor: 'a', action: 'x', subject_type: 's', subject_id: 'i' };
    expect(auditHash(GENESIS_HASH, { ...e, data: { a: 1, b: 2 } })).toBe(
      auditHash(GENESIS_HASH, { ...e, data: { b: 2, a: 1 } }),
    );
    const base = auditHash(GENESIS_HASH, { ...e, data: {} });
    for (const changed of [{ at: 2 }, { actor: 'b' }, { action: 'y' }, { subject_id: 'j' }, { seq: 2 }])
      expect(auditHash(GENESIS_HASH, { ...e, ...changed, data: {} })).not.toBe(base);
    expect(auditHash('f'.repeat(64), { ...e, data: {} })).not.toBe(base);
  });

  it('an empty chain verifies', () => {
    expect(store.audit.verify()).toEqual({ ok: true, events: 0, head: GENESIS_HASH });
  });

  it('refuses UPDATE and DELETE while the triggers stand', () => {
    appendN(2);
    expect(() => store.db.prepare("UPDATE audit_events SET actor = 'x' WHERE seq = 1").run()).toThrow(
      /append-only/,
    );
    expect(() => store.db.prepare('DELETE FROM audit_events WHERE seq = 2').run()).toThrow(/append-only/);
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 2 });
  });

  it.each([
    ['a changed field', "UPDATE audit_events SET actor = 'mallory' WHERE seq = 3", 3, /hash does not match/],
    ['changed data', `UPDATE audit_events SET data = '{"i":99}' WHERE seq = 4`, 4, /hash does not match/],
    ['a deleted row', 'DELETE FROM audit_events WHERE seq = 3', 4, /expected seq 3/],
    [
      'a row re-hashed without relinking',
      "UPDATE audit_events SET prev_hash = '0000000000000000000000000000000000000000000000000000000000000000' WHERE seq = 2",
      2,
      /prev_hash/,
    ],
  ] as const)('names the first bad row after %s', (_what, sql, badSeq, problem) => {
    appendN(6);
    dropTriggers();
    store.db.prepare(sql).run();
    const v = store.audit.verify();
    expect(v.ok).toBe(false);
    if (!v.ok) {
      expect(v.first_bad_seq).toBe(badSeq);
      expect(v.problem).toMatch(problem);
    }
  });

  it('a rewritten row whose hash was recomputed still breaks the link of the next row', () => {
    appendN(4);
    dropTriggers();
    const row = store.db.prepare('SELECT * FROM audit_events WHERE seq = 2').get() as {
      prev_hash: string;
      at: number;
      action: string;
      subject_type: string;
      subject_id: string;
    };
    const forged = auditHash(row.prev_hash, {
      ...row,
      seq: 2,
      actor: 'mallory',
      data: { i: 2, nested: { a: 1, b: 2 } },
    });
    store.db.prepare("UPDATE audit_events SET actor = 'mallory', hash = ? WHERE seq = 2").run(forged);
    const v = store.audit.verify();
    expect(v).toMatchObject({ ok: false, first_bad_seq: 3 });
  });

  it('appends inside a rolled-back transaction leave no row and run no after-commit callback', () => {
    appendN(1);
    let ran = false;
    expect(() =>
      store.transaction(() => {
        store.audit.append({
          at: 5,
          actor: 'a',
          action: 'worker.connected',
          subject_type: 's',
          subject_id: 'i',
        });
        store.afterCommit(() => {
          ran = true;
        });
        throw new Error('boom');
      }),
    ).toThrow('boom');
    expect(ran).toBe(false);
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 1 });
    // The next append continues the chain at seq 2.
    appendN(1);
    expect(store.audit.verify()).toMatchObject({ ok: true, events: 2 });
  });

  it('forSubject returns one subject’s events, oldest first, with parsed data', () => {
    appendN(5);
    const events = store.audit.forSubject('thing', 't1');
    expect(events.map((e) => e.seq)).toEqual([1, 3, 5]);
    expect(events[0]?.data).toEqual({ i: 1, nested: { a: 1, b: 2 } });
  });
});

describe('lastSeqBefore (the retention age cut-off)', () => {
  it('finds the newest row older than a time by searching seq, for every cut-off', () => {
    appendN(37); // at = 1001..1037
    expect(store.audit.lastSeqBefore(1001)).toBeNull();
    for (let at = 1002; at <= 1038; at++) expect(store.audit.lastSeqBefore(at)).toBe(at - 1001);
    expect(store.audit.lastSeqBefore(9_999)).toBe(37);
    store.close();
    store = Store.open(':memory:');
    expect(store.audit.lastSeqBefore(9_999)).toBeNull();
  });
});
