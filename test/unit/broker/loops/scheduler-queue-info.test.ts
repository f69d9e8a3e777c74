import { afterEach, describe, expect, it, vi } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { cancelTaskAs } from '../../../../src/broker/tools/tasks.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { CARDS, enrolledCluster } from '../../../support/enrolled-cluster.js';

// What a pass publishes for queued tasks (the pass keeps the decision's entries instead
// of copying every reason): positions in order, one reason object shared by tasks waiting for the same
// thing, and each caller of queueInfo gets its own copy, so nothing a caller does reaches the next one.

let f: BrokerFixture | undefined;
afterEach(() => f?.close());

describe('Scheduler.queueInfo', () => {
  it('gives positions in scheduling order and a copy of the reason to each caller', async () => {
    // The first task takes every card; the next three wait for cards.
    const c = await enrolledCluster([CARDS, 1, 1, 1]);
    f = c.f;
    const scheduler = new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
    const decision = scheduler.runPass();
    expect(decision.grants).toHaveLength(1);
    const waiting = decision.waiting.map((w) => w.task_id);
    expect(waiting).toHaveLength(3);
    const infos = waiting.map((id) => scheduler.queueInfo(id));
    expect(infos.map((i) => i?.position)).toEqual([1, 2, 3]);
    expect(infos[0]?.reason).toMatchObject({ code: 'waiting_for_cards' });
    // Same reason, not the same object: a caller that changes its copy changes nobody else's.
    expect(infos[1]?.reason).toEqual(infos[0]?.reason);
    expect(infos[1]?.reason).not.toBe(infos[0]?.reason);
    infos[0]!.reason['code'] = 'tampered';
    expect(scheduler.queueInfo(waiting[0]!)?.reason).toMatchObject({ code: 'waiting_for_cards' });
    expect(scheduler.queueInfo(waiting[1]!)?.reason).toMatchObject({ code: 'waiting_for_cards' });
    // A granted task has no queue info.
    expect(scheduler.queueInfo(decision.grants[0]!.task_id)).toBeNull();
  });
});

describe('a pass over an empty queue', () => {
  it('decides nothing, reads no snapshot, and forgets what the last pass published', async () => {
    // Four cards for a 4-card task; the 1-card task after it waits.
    const c = await enrolledCluster([CARDS, 1]);
    f = c.f;
    const scheduler = new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
    const first = scheduler.runPass();
    expect(first.grants).toHaveLength(1);
    const waiting = first.waiting[0]!.task_id;
    expect(scheduler.queueInfo(waiting)?.reason).toMatchObject({ code: 'waiting_for_cards' });
    // The waiting task leaves the queue: the next pass finds nothing to run.
    cancelTaskAs(f.deps, 'alice', f.deps.store.tasks.get(waiting)!);
    const views = vi.spyOn(f.deps.cluster.fleet, 'workerViews');
    const accounts = vi.spyOn(f.deps.store.accounts, 'list');
    const second = scheduler.runPass();
    expect(second).toEqual({ grants: [], waiting: [], reservations: [], preemptions: [] });
    expect(views).not.toHaveBeenCalled();
    expect(accounts).not.toHaveBeenCalled();
    expect(scheduler.queueInfo(waiting)).toBeNull();
  });
});
