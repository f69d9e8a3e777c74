import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import {
  EXECUTION_TABLE,
  type ExecutionPhase,
  type ReportedPhase,
} from '../../../../src/domain/machines/execution.js';
import { ManualClock } from '../../../../src/platform/clock.js';
import { type LocalStore, openLocalStore } from '../../../../worker/store/local-store.js';
import { ExecutionMoveError } from '../../../../worker/store/local-store-moves.js';
import { makePlan } from '../../../support/executor-plan.js';

/**
 * The worker's execution record moves only through the master's EXECUTION_TABLE, with compare-and-set
 * on the stored phase (ADR 0014): an illegal or stale move is a typed error and writes nothing.
 */

const REPORTED = (Object.keys(EXECUTION_TABLE) as ExecutionPhase[]).filter(
  (p): p is ReportedPhase => p !== 'assigned',
);
const open: LocalStore[] = [];
const clock = new ManualClock();

function store(): LocalStore {
  const s = openLocalStore(':memory:', { clock });
  open.push(s);
  return s;
}
afterEach(() => {
  for (const s of open.splice(0)) s.close();
});

function plan(id: string): ExecutionPlan {
  return makePlan({ executionId: id, argv: ['/usr/bin/true'], epoch: 2 });
}

const moveError = (code: string, extra: Record<string, unknown> = {}) =>
  expect.objectContaining({ name: 'ExecutionMoveError', code, ...extra });

describe('local execution moves', () => {
  it('follows the paths the worker takes: run, spawn failure, cleanup failure, refusal, recovery', () => {
    const s = store();
    s.recordExecution(plan('run'), 'accepted');
    s.moveExecution('run', 'accepted', 'started');
    s.moveExecution('run', 'started', 'exited');
    expect(s.moveExecution('run', 'exited', 'cleaned').phase).toBe('cleaned');

    s.recordExecution(plan('nospawn'), 'accepted');
    s.moveExecution('nospawn', 'accepted', 'exited');
    expect(s.moveExecution('nospawn', 'exited', 'cleanup_failed').phase).toBe('cleanup_failed');

    expect(s.recordExecution(plan('refused'), 'rejected').phase).toBe('rejected');

    // A restarted worker reports what the previous process left running as lost.
    s.recordExecution(plan('lost'), 'accepted');
    s.moveExecution('lost', 'accepted', 'started');
    expect(s.moveExecution('lost', 'started', 'exited').phase).toBe('exited');
  });

  it('refuses a move the table does not list, and writes nothing', () => {
    const s = store();
    const before = s.recordExecution(plan('e'), 'accepted');
    clock.advance(1000);
    const attempts: Array<[ReportedPhase, ReportedPhase]> = [
      ['accepted', 'cleaned'], // a jump to the end
      ['accepted', 'rejected'], // a refusal after accepting
      ['accepted', 'accepted'], // a repeat is not a no-op here
      ['accepted', 'cleanup_failed'],
    ];
    for (const [from, to] of attempts)
      expect(() => s.moveExecution('e', from, to), `${from} → ${to}`).toThrow(
        moveError('INVALID_STATE', { from, to, allowed: ['started', 'exited'] }),
      );
    expect(s.getExecution('e')).toEqual(before);
    // Nor can a first record start anywhere but at accepted or rejected.
    expect(() => s.recordExecution(plan('x'), 'started' as 'accepted')).toThrow(moveError('INVALID_STATE'));
    expect(s.getExecution('x')).toBeNull();
  });

  it('compare-and-set: a move from a phase the record has left is a CONFLICT and writes nothing', () => {
    const s = store();
    s.recordExecution(plan('e'), 'accepted');
    s.moveExecution('e', 'accepted', 'started');
    const before = s.getExecution('e');
    const result = { exit_code: 0, signal: null, failure_reason: null, outputs: [] };
    // accepted → exited is a legal row, but the record is at started now (a stale writer).
    expect(() => s.moveExecution('e', 'accepted', 'exited', result)).toThrow(
      moveError('CONFLICT', { from: 'accepted', stored: 'started' }),
    );
    expect(s.getExecution('e')).toEqual(before);
    expect(() => s.moveExecution('nobody', 'started', 'exited')).toThrow(moveError('NOT_FOUND'));
  });

  it('a final phase stays final, whatever a hostile caller claims', () => {
    const s = store();
    s.recordExecution(plan('r'), 'rejected');
    for (const to of REPORTED)
      expect(() => s.moveExecution('r', 'rejected', to)).toThrow(moveError('INVALID_STATE', { allowed: [] }));
    // Claiming another `from` than the stored one does not help: the stored phase decides.
    expect(() => s.moveExecution('r', 'accepted', 'started')).toThrow(moveError('CONFLICT'));
    expect(() => s.moveExecution('r', 'exited', 'cleaned')).toThrow(moveError('CONFLICT'));
    expect(s.getExecution('r')?.phase).toBe('rejected');
  });

  it('a refused move inside a caller transaction rolls back what the transaction did before it', () => {
    const s = store();
    s.recordExecution(plan('e'), 'accepted');
    expect(() =>
      s.transaction(() => {
        s.setExecutionPgid('e', 4242);
        s.moveExecution('e', 'accepted', 'cleaned');
      }),
    ).toThrow(ExecutionMoveError);
    expect(s.getExecution('e')).toMatchObject({ phase: 'accepted', pgid: null });
  });

  it('property: any sequence of attempted moves leaves a record that only ever followed the table', () => {
    const attempt = fc.record({
      from: fc.constantFrom<ExecutionPhase>('assigned', ...REPORTED),
      to: fc.constantFrom(...REPORTED),
    });
    fc.assert(
      fc.property(fc.array(attempt, { maxLength: 25 }), (attempts) => {
        const s = openLocalStore(':memory:', { clock });
        try {
          let model: ExecutionPhase = 'assigned';
          const path: ExecutionPhase[] = [model];
          for (const { from, to } of attempts) {
            const legal = from === model && EXECUTION_TABLE[from][to] === to;
            const run = () =>
              from === 'assigned'
                ? s.recordExecution(plan('p'), to as 'accepted')
                : s.moveExecution('p', from, to);
            if (legal) {
              expect(run().phase).toBe(to);
              model = to;
              path.push(model);
            } else {
              expect(run).toThrow(ExecutionMoveError);
            }
            expect(s.getExecution('p')?.phase ?? 'assigned').toBe(model);
          }
          for (let i = 1; i < path.length; i++)
            expect(EXECUTION_TABLE[path[i - 1]!][path[i] as ReportedPhase]).toBe(path[i]);
        } finally {
          s.close();
        }
      }),
      { numRuns: 200 },
    );
  });
});
