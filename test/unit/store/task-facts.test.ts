import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canonicalJson, canonicalJsonWith } from '../../../src/contracts/canonical-json.js';
import type { TaskSpec } from '../../../src/contracts/task-spec.js';
import type { Store } from '../../../src/store/store.js';
import { seededTask, storeWithRevision } from '../../support/store-seed.js';

/**
 * docs/performance.md: an execution report and a wait_for_task wake-up read a task's state facts and
 * declared outputs with SQLite's JSON functions instead of parsing its spec; an update does not
 * serialise the (immutable) spec. The facts must say what the whole record says.
 */

let store: Store;
beforeEach(() => {
  store = storeWithRevision();
});
afterEach(() => store.close());

const task = seededTask;

describe('task facts', () => {
  it('reads state, reason code and declared outputs as the whole record has them', () => {
    const outputs = [
      { path: 'out/a.txt', required: true },
      { path: 'b "quoted" é.bin', required: false },
    ];
    store.tasks.insert(task({ outputs } as Partial<TaskSpec>));
    const whole = store.tasks.get('task_1')!;
    expect(store.tasks.reportFacts('task_1')).toEqual({
      owner_id: whole.owner_id,
      state: whole.state,
      desired: whole.desired,
      failure_reason: whole.failure_reason,
      reason_code: 'pending_scheduling',
      outputs,
    });
    const { outputs: _o, ...state } = store.tasks.reportFacts('task_1')!;
    expect(store.tasks.stateFacts('task_1')).toEqual(state);
  });

  it('has no reason code without a reason or with a non-string code, and no outputs without any', () => {
    store.tasks.insert(task({}, { reason: null }));
    expect(store.tasks.reportFacts('task_1')).toMatchObject({ reason_code: null, outputs: [] });
    const t = store.tasks.get('task_1')!;
    store.tasks.update({ ...t, reason: { code: 7 } }, 'QUEUED');
    expect(store.tasks.stateFacts('task_1')?.reason_code).toBeNull();
    expect(store.tasks.stateFacts('task_nope')).toBeUndefined();
    expect(store.tasks.reportFacts('task_nope')).toBeUndefined();
  });

  it('an update changes the state columns and leaves the spec as stored', () => {
    store.tasks.insert(task({ outputs: [{ path: 'x', required: true }] } as Partial<TaskSpec>));
    const t = store.tasks.get('task_1')!;
    const moved = { ...t, state: 'ASSIGNED' as const, reason: null, updated_at: 5 };
    expect(store.tasks.update(moved, 'QUEUED')).toBe(true);
    expect(store.tasks.update(moved, 'QUEUED')).toBe(false);
    expect(store.tasks.get('task_1')).toEqual(moved);
  });
});

describe('canonicalJsonWith', () => {
  it('is canonicalJson with the named members taken as already serialised', () => {
    const spec = { z: [1, { b: 2, a: 'é' }], a: null, u: undefined };
    const body = { spec, proposal_id: 'prop_1', none: undefined, constructor: 'x' };
    expect(canonicalJsonWith(body, { spec: canonicalJson(spec) })).toBe(canonicalJson(body));
    expect(canonicalJsonWith(body, {})).toBe(canonicalJson(body));
  });
});
