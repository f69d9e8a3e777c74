import { describe, expect, it } from 'vitest';
import { followEnds, stateLine } from '../../../../src/cli/agent/task-follow.js';
import type { TaskView } from '../../../../src/contracts/views.js';

/**
 * `gpu-broker run` / `task` follow a task through a partition (docs/operations.md "Partitions"): a task parked because its
 * worker fell silent is not the end (it comes back by itself if the worker does), and the state line
 * says what happened to the worker.
 */

function view(over: Partial<TaskView>): TaskView {
  return {
    task_id: 'task_1',
    proposal_id: 'prop_1',
    revision_id: 'rev_1',
    spec_digest: 'd',
    title: 't',
    owner: 'alice',
    state: 'RUNNING',
    desired: 'run',
    reason: null,
    position: null,
    failure_reason: null,
    failure_detail: null,
    exit_code: null,
    signal: null,
    worker_id: 'w1',
    lease_epoch: 1,
    cards: [{ index: 0, uuid: 'SIM-0' }],
    simulated: true,
    slurm: null,
    preemptions: 0,
    created_at: '2026-12-05T00:00:00.000Z',
    approved_at: '2026-12-05T00:00:00.000Z',
    started_at: null,
    finished_at: null,
    next_action: '',
    ...over,
  };
}

describe('following a task through a partition', () => {
  it('goes on following a task parked for silence, stops at any other final state', () => {
    const unreachable = { code: 'worker_unreachable', message: 'worker w1 has not been heard from since …' };
    expect(followEnds(view({ state: 'RECONCILIATION_REQUIRED', reason: unreachable }))).toBe(false);
    expect(followEnds(view({ state: 'RECONCILIATION_REQUIRED', reason: null }))).toBe(true);
    expect(followEnds(view({ state: 'COMPLETED' }))).toBe(true);
    expect(followEnds(view({ state: 'RUNNING' }))).toBe(false);
  });

  it('says what happened to the worker in the state line', () => {
    const back = {
      code: 'worker_returned',
      message: 'worker w1 was unreachable for 120 s; the task kept running',
    };
    expect(stateLine(view({ reason: back }))).toBe(
      'task task_1 RUNNING on w1 cards 0 (simulated cards) (worker w1 was unreachable for 120 s; the task kept running)',
    );
    expect(stateLine(view({}))).toBe('task task_1 RUNNING on w1 cards 0 (simulated cards)');
  });
});
