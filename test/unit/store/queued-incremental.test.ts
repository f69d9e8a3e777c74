import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { TaskState } from '../../../src/domain/machines/task.js';
import { Store } from '../../../src/store/store.js';
import { type QueuedTaskRow, type TaskRecord, TasksRepo } from '../../../src/store/tasks-repo.js';

// TasksRepo.queuedForScheduling keeps the queue in memory and re-reads only the tasks written since
// (docs/performance.md "Noisy neighbours"). Property: after any sequence of inserts, moves, cancels, rollbacks (whole transactions and
// savepoints), reads inside transactions and forced full reads, it answers exactly what a full read
// from SQLite answers (a fresh repository on the same connection), in the same order.

const STATES: TaskState[] = ['QUEUED', 'ASSIGNED', 'RUNNING', 'COMPLETED', 'CANCELLED'];
const TERMINAL = new Set<TaskState>(['COMPLETED', 'CANCELLED']);

type Op =
  | { kind: 'insert'; state: TaskState; priority: number; approved_at: number; cards: number }
  | { kind: 'move'; pick: number; to: TaskState; staleExpected: boolean }
  | { kind: 'cancel'; pick: number }
  | { kind: 'rollback'; inner: Op[] }
  | { kind: 'savepoint'; inner: Op[]; rolledBack: boolean }
  | { kind: 'read-inside' }
  | { kind: 'forget' }
  | { kind: 'read' };

const write: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('insert' as const),
    state: fc.constantFrom<TaskState>('QUEUED', 'QUEUED', 'RUNNING'),
    priority: fc.integer({ min: 0, max: 2 }),
    approved_at: fc.integer({ min: 0, max: 5 }),
    cards: fc.integer({ min: 1, max: 8 }),
  }),
  fc.record({
    kind: fc.constant('move' as const),
    pick: fc.nat(),
    to: fc.constantFrom(...STATES),
    staleExpected: fc.boolean(),
  }),
  fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat() }),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: write },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('rollback' as const),
      inner: fc.array(write, { maxLength: 4 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('savepoint' as const),
      inner: fc.array(write, { maxLength: 4 }),
      rolledBack: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'read-inside' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'forget' as const }) },
  { weight: 3, arbitrary: fc.constant({ kind: 'read' as const }) },
);

let store: Store | undefined;
afterEach(() => store?.close());

function task(n: number, o: Extract<Op, { kind: 'insert' }>): TaskRecord {
  return {
    id: `task_${String(n).padStart(4, '0')}`,
    proposal_id: `prop_${n}`,
    revision_id: `rev_${n}`,
    owner_id: `owner_${n % 3}`,
    spec: {
      cards: { count: o.cards, ...(n % 2 === 0 ? { model: 'H100' } : {}) },
      runtime: { kind: 'process', argv: ['/bin/true'] },
    } as unknown as TaskRecord['spec'],
    spec_digest: 'a'.repeat(64),
    priority: o.priority,
    state: o.state,
    desired: 'run',
    reason: null,
    failure_reason: null,
    exit_code: null,
    signal: null,
    approved_at: o.approved_at,
    created_at: 0,
    updated_at: 0,
    started_at: null,
    finished_at: TERMINAL.has(o.state) ? 1 : null,
  };
}

describe('TasksRepo.queuedForScheduling (incremental)', () => {
  it('equals a full read from SQLite after any sequence of writes, rollbacks and reads', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
        store?.close();
        store = Store.open(':memory:');
        // Only the tasks table is exercised: its references to proposals and principals are not.
        store.db.pragma('foreign_keys = OFF');
        const s = store;
        const ids: string[] = [];
        const full = (): QueuedTaskRow[] => new TasksRepo(s.db).queuedForScheduling();
        const apply = (o: Op): void => {
          switch (o.kind) {
            case 'insert': {
              const t = task(ids.length, o);
              s.tasks.insert(t);
              ids.push(t.id);
              return;
            }
            case 'move': {
              if (ids.length === 0) return;
              // A task inserted by a write that rolled back is gone.
              const t = s.tasks.get(ids[o.pick % ids.length]!);
              if (t === undefined) return;
              const expected = o.staleExpected ? (t.state === 'QUEUED' ? 'RUNNING' : 'QUEUED') : t.state;
              s.tasks.update({ ...t, state: o.to, finished_at: TERMINAL.has(o.to) ? 2 : null }, expected);
              return;
            }
            case 'cancel': {
              if (ids.length === 0) return;
              const t = s.tasks.get(ids[o.pick % ids.length]!);
              if (t === undefined) return;
              s.tasks.update({ ...t, desired: 'cancel' }, t.state);
              return;
            }
            case 'rollback':
              expect(() =>
                s.transaction(() => {
                  for (const w of o.inner) apply(w);
                  expect(s.tasks.queuedForScheduling()).toEqual(full());
                  throw new Error('roll back');
                }),
              ).toThrow('roll back');
              return;
            case 'savepoint':
              s.transaction(() => {
                try {
                  s.transaction(() => {
                    for (const w of o.inner) apply(w);
                    if (o.rolledBack) throw new Error('roll back the savepoint');
                  });
                } catch {
                  // the savepoint's writes are gone; the outer transaction commits
                }
              });
              return;
            case 'read-inside':
              s.transaction(() => expect(s.tasks.queuedForScheduling()).toEqual(full()));
              return;
            case 'forget':
              s.tasks.forgetQueued();
              return;
            case 'read':
              expect(s.tasks.queuedForScheduling()).toEqual(full());
              return;
          }
        };
        for (const o of ops) apply(o);
        expect(s.tasks.queuedForScheduling()).toEqual(full());
      }),
      { numRuns: 300 },
    );
  });

  it('reads again only the rows written since the last read', () => {
    store = Store.open(':memory:');
    store.db.pragma('foreign_keys = OFF');
    const s = store;
    for (let n = 0; n < 5; n++)
      s.tasks.insert(task(n, { kind: 'insert', state: 'QUEUED', priority: 0, approved_at: n, cards: 1 }));
    const first = s.tasks.queuedForScheduling();
    expect(first).toHaveLength(5);
    // A write that bypasses the repository is not seen until a full read: proof that reads are incremental.
    s.db.prepare("UPDATE tasks SET state = 'RUNNING' WHERE id = ?").run(first[0]!.id);
    expect(s.tasks.queuedForScheduling().map((t) => t.id)).toEqual(first.map((t) => t.id));
    s.tasks.forgetQueued();
    expect(s.tasks.queuedForScheduling().map((t) => t.id)).toEqual(first.slice(1).map((t) => t.id));
  });
});
