import { describe, expect, it } from 'vitest';
import { SCHEDULER_TOPICS } from '../../../../src/broker/loops/scheduler.js';
import { moveLease } from '../../../../src/broker/machines/lease.js';
import { moveTask } from '../../../../src/broker/machines/task.js';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import type { LeaseRecord } from '../../../../src/store/leases-repo.js';
import { enrolledCluster, WORKER } from '../../../support/enrolled-cluster.js';
import { validSpec } from '../../../support/spec.js';

// Which changes wake the scheduler (docs/performance.md "Noisy neighbours"): a pass reads the whole queue, so only a change that
// can alter what it decides may ask for one. Every task move used to (TASKS_TOPIC): two passes per task
// over a queue of hundreds that could grant nothing.

type Fixture = Awaited<ReturnType<typeof enrolledCluster>>['f'];

/** The topics notified while `act` runs (and its transaction commits) that would ask for a pass. */
function wakes(f: Fixture, act: () => void): string[] {
  const seen: string[] = [];
  const off = f.deps.notifier.onAny((t) => {
    if (SCHEDULER_TOPICS.has(t)) seen.push(t);
  });
  try {
    f.deps.store.transaction(act);
  } finally {
    off();
  }
  return seen;
}

function lease(f: Fixture, taskId: string, index: number): LeaseRecord {
  const now = f.deps.clock.now();
  const l: LeaseRecord = {
    id: `lease-${taskId}-${index}`,
    task_id: taskId,
    worker_id: WORKER,
    lease_epoch: 1,
    state: 'ACTIVE',
    reason: null,
    created_at: now,
    updated_at: now,
    released_at: null,
    cards: [{ index, uuid: `SIM-${index}` }],
  };
  f.deps.store.leases.insertLease(l);
  return l;
}

describe('what wakes the scheduler', () => {
  it('a task joining the queue does', async () => {
    const { f } = await enrolledCluster([]);
    const alice = f.principal('alice2', ['submitter']);
    const rita = f.principal('rita2', ['reviewer']);
    const r = (await f.invoke(alice, 'create_proposal', {
      spec: validSpec({ cards: { count: 1 }, outputs: [] }),
      idempotency_key: 'wake-1',
    })) as RevisionResult;
    await f.invoke(alice, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: 'wake-2',
    });
    const seen: string[] = [];
    const off = f.deps.notifier.onAny((t) => {
      if (SCHEDULER_TOPICS.has(t)) seen.push(t);
    });
    await f.invoke(rita, 'submit_review', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      decision: 'APPROVE',
      comments: 'ok',
      idempotency_key: 'wake-3',
    });
    off();
    expect(seen).toEqual(['queue']);
    f.close();
  });

  it("a task's own moves (granted, started, exited, cleaned) and its lease going RELEASING do not; the release does", async () => {
    const { f } = await enrolledCluster([1]);
    const queued = f.deps.store.tasks.inState('QUEUED')[0]!;
    let task = queued;
    const l = lease(f, task.id, 0);
    expect(wakes(f, () => (task = moveTask(f.deps, task, 'lease_granted', 'scheduler')))).toEqual([]);
    expect(wakes(f, () => (task = moveTask(f.deps, task, 'started', 'worker')))).toEqual([]);
    let held = l;
    expect(
      wakes(f, () => {
        task = moveTask(f.deps, task, 'exited', 'worker');
        held = moveLease(f.deps, held, 'execution_ended', 'worker');
      }),
    ).toEqual([]);
    expect(
      wakes(f, () => {
        held = moveLease(f.deps, held, 'cleaned', 'worker');
        task = moveTask(f.deps, task, 'cleaned_success', 'worker');
      }),
    ).toEqual(['cards']);
    f.close();
  });

  it("a quarantined lease does: its cards stop counting against its owner's quota", async () => {
    const { f } = await enrolledCluster([1]);
    const task = f.deps.store.tasks.inState('QUEUED')[0]!;
    const l = lease(f, task.id, 1);
    expect(wakes(f, () => moveLease(f.deps, l, 'quarantine', 'sweeper', 'cleanup receipt overdue'))).toEqual([
      'cards',
    ]);
    f.close();
  });
});
