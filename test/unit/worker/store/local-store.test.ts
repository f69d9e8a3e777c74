import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import type { LocalStore } from '../../../../worker/store/local-store.js';
import { LOCAL_STORE_SCHEMA_VERSION, openLocalStore } from '../../../../worker/store/local-store.js';
import { ExecutionMoveError } from '../../../../worker/store/local-store-moves.js';
import { makePlan } from '../../../support/executor-plan.js';
import { seedExecution } from '../../../support/worker-store.js';

let dir: string;
let file: string;
let clock: number;
const now = (): number => clock;
const open: LocalStore[] = [];

/** Frames in the WAL of `name` (pages written by commits since the last checkpoint). */
function walFrames(name = 'worker.sqlite'): number {
  const wal = join(dir, `${name}-wal`);
  return existsSync(wal) ? Math.max(0, (statSync(wal).size - 32) / (4096 + 24)) : 0;
}

function openStore(path = file): LocalStore {
  const store = openLocalStore(path, { clock: { now } });
  open.push(store);
  return store;
}

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gpu-broker-local-store-'));
  file = join(dir, 'worker.sqlite');
  clock = 1_000_000;
});
afterEach(() => {
  for (const s of open.splice(0)) {
    try {
      s.close();
    } catch {
      // already closed by the test
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

function plan(executionId: string, epoch = 3): ExecutionPlan {
  return makePlan({ executionId, argv: ['/usr/bin/true'], epoch });
}

describe('schema', () => {
  it('opens a file in WAL mode at the current schema version', () => {
    openStore().close();
    const db = new Database(file);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('user_version', { simple: true })).toBe(LOCAL_STORE_SCHEMA_VERSION);
    db.close();
  });

  it('refuses a file written by a newer worker', () => {
    const db = new Database(file);
    db.pragma(`user_version = ${LOCAL_STORE_SCHEMA_VERSION + 1}`);
    db.close();
    expect(() => openStore()).toThrow(/newer than this worker understands/);
  });

  it('works in memory', () => {
    const store = openStore(':memory:');
    expect(store.checkAndRaiseEpoch([0], 1)).toEqual({ ok: true });
  });
});

describe('card epochs', () => {
  it('refuses lower epochs, accepts equal and higher ones', () => {
    const store = openStore();
    expect(store.getCardEpoch(1)).toBe(0);
    expect(store.checkAndRaiseEpoch([0, 1], 5)).toEqual({ ok: true });
    expect(store.checkAndRaiseEpoch([1], 4)).toEqual({
      ok: false,
      code: 'STALE_EPOCH',
      card_index: 1,
      recorded_epoch: 5,
    });
    // The same assign delivered twice is not stale.
    expect(store.checkAndRaiseEpoch([0, 1], 5)).toEqual({ ok: true });
    expect(store.checkAndRaiseEpoch([1, 2], 6)).toEqual({ ok: true });
    expect([store.getCardEpoch(0), store.getCardEpoch(1), store.getCardEpoch(2)]).toEqual([5, 6, 6]);
  });

  it('strict (a new execution): an epoch equal to a mark belongs to another execution and is refused', () => {
    // docs/state-machines.md: a master restored from a backup re-issued epoch 5 on card 0 while 5 still ran.
    const store = openStore();
    expect(store.checkAndRaiseEpoch([0], 5, { strict: true })).toEqual({ ok: true });
    expect(store.checkAndRaiseEpoch([0], 5, { strict: true })).toEqual({
      ok: false,
      code: 'STALE_EPOCH',
      card_index: 0,
      recorded_epoch: 5,
    });
    expect(store.checkAndRaiseEpoch([0, 3], 6, { strict: true })).toEqual({ ok: true });
    expect(store.listCardEpochs()).toEqual([
      { index: 0, epoch: 6 },
      { index: 3, epoch: 6 },
    ]);
  });

  it('raises no mark when any card refuses', () => {
    const store = openStore();
    store.checkAndRaiseEpoch([2], 9);
    expect(store.checkAndRaiseEpoch([3, 2, 4], 8)).toMatchObject({
      ok: false,
      card_index: 2,
      recorded_epoch: 9,
    });
    expect(store.getCardEpoch(3)).toBe(0);
    expect(store.getCardEpoch(4)).toBe(0);
  });

  it('keeps marks across reopening', () => {
    openStore().checkAndRaiseEpoch([7], 12);
    open[0]!.close();
    const again = openStore();
    expect(again.checkAndRaiseEpoch([7], 11)).toMatchObject({ ok: false, code: 'STALE_EPOCH' });
  });

  it('rolls back with an enclosing transaction', () => {
    const store = openStore();
    expect(() =>
      store.transaction(() => {
        store.checkAndRaiseEpoch([0], 4);
        throw new Error('assign failed later');
      }),
    ).toThrow('assign failed later');
    expect(store.getCardEpoch(0)).toBe(0);
  });
});

describe('executions', () => {
  it('records phases and results and lists the unfinished ones', () => {
    const store = openStore();
    const first = store.recordExecution(plan('e1'), 'accepted');
    expect(first).toMatchObject({
      execution_id: 'e1',
      task_id: 'task-of-e1',
      lease_epoch: 3,
      phase: 'accepted',
    });
    expect(first.plan).toEqual(plan('e1'));
    expect(first.result).toBeNull();

    clock += 10;
    seedExecution(store, plan('e2', 4), 'started');
    clock += 10;
    const result = {
      exit_code: 0,
      signal: null,
      failure_reason: null,
      outputs: [{ path: 'm.json', size: 2, sha256: 'b'.repeat(64) }],
    };
    store.moveExecution('e1', 'accepted', 'exited', result); // never started: could not spawn
    const e1 = store.getExecution('e1')!;
    expect(e1).toMatchObject({ phase: 'exited', result, created_at: 1_000_000, updated_at: 1_000_020 });

    // A later phase without a result keeps the stored result.
    store.moveExecution('e1', 'exited', 'cleaned');
    expect(store.getExecution('e1')).toMatchObject({ phase: 'cleaned', result });
    expect(store.listUnfinishedExecutions().map((e) => e.execution_id)).toEqual(['e2']);
    expect(store.getExecution('nope')).toBeNull();
  });

  it('never records an execution twice, so its plan is never replaced', () => {
    const store = openStore();
    store.recordExecution(plan('e1', 3), 'accepted');
    const other = { ...plan('e1', 9), task_id: 'someone-else' };
    expect(() => store.recordExecution(other, 'accepted')).toThrow(
      expect.objectContaining({ code: 'CONFLICT', stored: 'accepted' }),
    );
    expect(() => store.recordExecution(other, 'rejected')).toThrow(ExecutionMoveError);
    expect(store.getExecution('e1')).toMatchObject({
      task_id: 'task-of-e1',
      lease_epoch: 3,
      phase: 'accepted',
    });
  });

  it('parses a plan once, but again when its stored text changed underneath (a damaged file fails loudly)', () => {
    const store = openStore();
    seedExecution(store, plan('e1'), 'started');
    const a = store.getExecution('e1')!;
    expect(store.getExecution('e1')!.plan).toBe(a.plan); // the same parsed object: not validated again
    expect(store.listUnfinishedExecutions()[0]!.plan).toBe(a.plan);
    // Another writer (a restore, an edit) changes the stored plan: the cache must not hide it.
    const raw = new Database(file);
    raw
      .prepare(
        "UPDATE executions SET plan_json = json_set(plan_json, '$.lease_epoch', 7) WHERE execution_id = 'e1'",
      )
      .run();
    expect(store.getExecution('e1')!.plan.lease_epoch).toBe(7);
    raw
      .prepare(
        "UPDATE executions SET plan_json = json_set(plan_json, '$.cards', 'none') WHERE execution_id = 'e1'",
      )
      .run();
    raw.close();
    expect(() => store.getExecution('e1')).toThrow();
  });

  it('lists unfinished executions after reopening, oldest first', () => {
    const store = openStore();
    seedExecution(store, plan('b'), 'started');
    clock += 1;
    store.recordExecution(plan('a'), 'accepted');
    store.recordExecution(plan('c'), 'rejected');
    store.close();
    expect(
      openStore()
        .listUnfinishedExecutions()
        .map((e) => e.execution_id),
    ).toEqual(['b', 'a']);
  });
});

describe('outbox', () => {
  const msg = (bootId: string, text: string) => (seq: number) => ({
    type: 'sample',
    boot_id: bootId,
    seq,
    text,
  });

  it('numbers messages per boot, lists the unacknowledged in order, and survives reopening', () => {
    const store = openStore();
    expect(store.appendOutbox('boot-A', msg('boot-A', 'one')).seq).toBe(1);
    expect(store.appendOutbox('boot-A', msg('boot-A', 'two')).seq).toBe(2);
    expect(store.appendOutbox('boot-A', msg('boot-A', 'three'))).toEqual({
      boot_id: 'boot-A',
      seq: 3,
      message: { type: 'sample', boot_id: 'boot-A', seq: 3, text: 'three' },
      created_at: 1_000_000,
    });
    expect(store.ackOutbox('boot-A', 2)).toBe(true);
    expect(store.ackOutbox('boot-A', 2)).toBe(false);
    store.close();

    // After a restart: a new boot, and the old boot's leftovers are resent first, in order.
    const again = openStore();
    expect(again.listUnackedOutbox().map((e) => [e.boot_id, e.seq])).toEqual([
      ['boot-A', 1],
      ['boot-A', 3],
    ]);
    expect(again.appendOutbox('boot-B', msg('boot-B', 'b1')).seq).toBe(1);
    expect(again.appendOutbox('boot-A', msg('boot-A', 'late')).seq).toBe(4);
    expect(again.listUnackedOutbox().map((e) => `${e.boot_id}/${e.seq}`)).toEqual([
      'boot-A/1',
      'boot-A/3',
      'boot-B/1',
      'boot-A/4',
    ]);
    expect(again.listUnackedOutbox(2)).toHaveLength(2);
    expect(again.listUnackedOutbox()[0]!.message).toEqual({
      type: 'sample',
      boot_id: 'boot-A',
      seq: 1,
      text: 'one',
    });

    // welcome.worker_marks acknowledges everything up to a seq at once.
    expect(again.ackOutboxThrough('boot-A', 4)).toBe(3);
    expect(again.listUnackedOutbox().map((e) => `${e.boot_id}/${e.seq}`)).toEqual(['boot-B/1']);
  });

  it('applies a batch of acks in one transaction; unknown and repeated acks change nothing', () => {
    const store = openStore();
    for (const t of ['1', '2', '3']) store.appendOutbox('boot-A', msg('boot-A', t));
    store.appendOutbox('boot-A', (seq) => ({ type: 'log', boot_id: 'boot-A', seq, data: 'x' }));
    const walBefore = walFrames();
    expect(
      store.ackOutboxMany([
        { boot_id: 'boot-A', seq: 1 },
        { boot_id: 'boot-A', seq: 3 },
        { boot_id: 'boot-A', seq: 3 }, // repeated
        { boot_id: 'boot-A', seq: 4 }, // a log chunk: deleted at once
        { boot_id: 'boot-A', seq: 99 }, // never sent
        { boot_id: 'boot-Z', seq: 1 }, // unknown boot
      ]),
    ).toBe(3);
    const batchFrames = walFrames() - walBefore;
    // One commit writes each page it changed once; the same acks one by one write that page per commit.
    const single = openStore(join(dir, 'single.sqlite'));
    for (const t of ['1', '2', '3']) single.appendOutbox('boot-A', msg('boot-A', t));
    single.appendOutbox('boot-A', (seq) => ({ type: 'log', boot_id: 'boot-A', seq, data: 'x' }));
    const singleBefore = walFrames('single.sqlite');
    for (const seq of [1, 3, 4]) single.ackOutbox('boot-A', seq);
    expect(batchFrames).toBeLessThan(walFrames('single.sqlite') - singleBefore);
    expect(store.listUnackedOutbox().map((e) => e.seq)).toEqual([2]);
    expect(store.hasUnackedOutbox()).toBe(true);
    expect(store.ackOutboxMany([])).toBe(0);
    expect(store.ackOutboxMany([{ boot_id: 'boot-A', seq: 2 }])).toBe(1);
    expect(store.hasUnackedOutbox()).toBe(false);
    // The acknowledged log chunk is gone; the others are kept until pruned.
    const kept = new Database(file);
    expect(kept.prepare('SELECT seq FROM outbox ORDER BY seq').pluck().all()).toEqual([1, 2, 3]);
    kept.close();
  });

  it('pages the unacknowledged messages as their stored text, to be sent as is', () => {
    const store = openStore();
    store.appendOutbox('boot-A', msg('boot-A', 'one'));
    store.appendOutbox('boot-A', msg('boot-A', 'é\u2028"\\'));
    store.appendOutbox('boot-A', msg('boot-A', 'three'));
    store.ackOutbox('boot-A', 1);
    const text = JSON.stringify(msg('boot-A', 'é\u2028"\\')(2));
    expect(store.listUnackedOutboxAfter(0, 1)).toEqual([
      { id: 2, boot_id: 'boot-A', seq: 2, kind: 'sample', text },
    ]);
    expect(store.listUnackedOutboxAfter(2, 10).map((e) => e.seq)).toEqual([3]);
    expect(store.listUnackedOutboxAfter(3, 10)).toEqual([]);
  });

  it('prunes acknowledged messages without ever reusing a seq', () => {
    const store = openStore();
    store.appendOutbox('boot-A', msg('boot-A', '1'));
    store.appendOutbox('boot-A', msg('boot-A', '2'));
    clock = 2_000;
    store.ackOutbox('boot-A', 1);
    store.ackOutbox('boot-A', 2);
    expect(store.pruneOutbox(2_000)).toBe(0); // acknowledged at 2 000, not before
    expect(store.pruneOutbox(2_001)).toBe(2);
    expect(store.appendOutbox('boot-A', msg('boot-A', '3')).seq).toBe(3);
  });

  it('stores nothing when building the message fails', () => {
    const store = openStore();
    expect(() =>
      store.appendOutbox('boot-A', () => {
        throw new Error('bad message');
      }),
    ).toThrow('bad message');
    expect(store.appendOutbox('boot-A', msg('boot-A', 'ok')).seq).toBe(1);
    expect(store.listUnackedOutbox()).toHaveLength(1);
  });
});

describe('master marks', () => {
  it('records the highest processed seq per master boot and drops duplicates', () => {
    const store = openStore();
    expect(store.getMasterMark('m1')).toBe(0);
    expect(store.raiseMasterMark('m1', 3)).toBe(true);
    expect(store.raiseMasterMark('m1', 3)).toBe(false);
    expect(store.raiseMasterMark('m1', 2)).toBe(false);
    expect(store.raiseMasterMark('m1', 4)).toBe(true);
    store.close();
    const again = openStore();
    expect(again.getMasterMark('m1')).toBe(4);
    expect(again.listMasterMarks()).toEqual([{ boot_id: 'm1', seq: 4 }]);
  });

  it('keeps only the 16 most recently advanced master boots', () => {
    const store = openStore();
    for (let i = 0; i < 20; i++) {
      clock += 1;
      store.raiseMasterMark(`m${i}`, 1);
    }
    const marks = store.listMasterMarks();
    expect(marks).toHaveLength(16);
    expect(marks[0]).toEqual({ boot_id: 'm19', seq: 1 });
    expect(store.getMasterMark('m0')).toBe(0);
  });
});
