import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ReportedPhase } from '../../../../src/domain/machines/execution.js';
import { pruneExecutionDirs } from '../../../../worker/executions/dir-retention.js';
import { type LocalStore, openLocalStore } from '../../../../worker/store/local-store.js';
import { makePlan } from '../../../support/executor-plan.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';
import { seedExecution } from '../../../support/worker-store.js';

/**
 * Retention of finished execution directories (docs/operations.md "Audit retention"): only cleaned or rejected executions, older
 * than the age and beyond the newest N, with nothing about them still unacknowledged, lose their folder.
 */

const HOUR = 3600_000;
let clock: number;
let store: LocalStore;
let dir: string;

/** An execution in `phase` last updated at the current clock, with a folder holding a log. */
function execution(id: string, phase: ReportedPhase): void {
  seedExecution(store, makePlan({ executionId: id, argv: ['/usr/bin/true'] }), phase);
  mkdirSync(join(dir, id, 'task'), { recursive: true });
  writeFileSync(join(dir, id, 'stdout.log'), 'log\n');
}

beforeEach(() => {
  clock = 10 * 24 * HOUR;
  const root = makeTempDir('exec-dirs');
  store = openLocalStore(join(root, 'worker.sqlite'), { clock: { now: () => clock } });
  dir = join(root, 'executions');
});
afterEach(() => store.close());
afterAll(() => removeTempDirs());

describe('pruneExecutionDirs', () => {
  it('deletes old finished folders beyond the newest N, keeps everything else', () => {
    for (let i = 1; i <= 5; i++) {
      execution(`ex_old${i}`, i === 5 ? 'rejected' : 'cleaned');
      clock += 1000;
    }
    execution('ex_failed', 'cleanup_failed');
    execution('ex_running', 'started');
    clock += 1000;
    execution('ex_recent', 'cleaned');
    // An old one whose cleanup receipt the master has not acknowledged yet.
    execution('ex_unacked', 'cleaned');
    store.appendOutbox('boot-1', (seq) => ({
      type: 'execution',
      execution_id: 'ex_unacked',
      phase: 'cleaned',
      seq,
    }));
    clock += 2 * HOUR;
    execution('ex_new', 'cleaned');

    // Keep the newest 3 finished (ex_new, ex_unacked, ex_recent) and anything younger than an hour.
    const removed = pruneExecutionDirs(store, dir, clock, { keep_count: 3, keep_seconds: 3600 });
    expect(removed.sort()).toEqual(['ex_old1', 'ex_old2', 'ex_old3', 'ex_old4', 'ex_old5']);
    for (const id of removed) expect(existsSync(join(dir, id))).toBe(false);
    for (const id of ['ex_failed', 'ex_running', 'ex_recent', 'ex_unacked', 'ex_new'])
      expect(existsSync(join(dir, id))).toBe(true);
    // The records stay (hello still reports them); a second pass has nothing left to do.
    expect(store.getExecution('ex_old1')?.phase).toBe('cleaned');
    expect(pruneExecutionDirs(store, dir, clock, { keep_count: 3, keep_seconds: 3600 })).toEqual([]);
  });

  it('deletes a folder once its last message is acknowledged', () => {
    execution('ex_a', 'cleaned');
    const entry = store.appendOutbox('boot-1', (seq) => ({
      type: 'execution',
      execution_id: 'ex_a',
      phase: 'cleaned',
      seq,
    }));
    clock += 2 * HOUR;
    expect(pruneExecutionDirs(store, dir, clock, { keep_count: 0, keep_seconds: 60 })).toEqual([]);
    store.ackOutbox('boot-1', entry.seq);
    expect(pruneExecutionDirs(store, dir, clock, { keep_count: 0, keep_seconds: 60 })).toEqual(['ex_a']);
    expect(existsSync(join(dir, 'ex_a'))).toBe(false);
  });
});
