import { afterEach, describe, expect, it } from 'vitest';
import type { BrokerFixture } from '../../support/deps.js';
import { enrolledCluster } from '../../support/enrolled-cluster.js';

// queuedForScheduling keeps the spec-derived part of each queued task between passes (docs/performance.md "Noisy neighbours"); what
// can change (priority, desired, the state itself) is read fresh on every pass.

let f: BrokerFixture | undefined;
afterEach(() => f?.close());

describe('TasksRepo.queuedForScheduling', () => {
  it('reads the spec part once, the mutable columns every time, and forgets tasks that left the queue', async () => {
    const c = await enrolledCluster([1, 3]);
    f = c.f;
    const tasks = f.deps.store.tasks;
    const first = tasks.queuedForScheduling();
    expect(first.map((t) => t.spec.cards.count)).toEqual([1, 3]);
    expect(first.every((t) => t.runtime_kind === 'process' && t.mounts.length === 0)).toBe(true);

    const [a, b] = first;
    const taskA = tasks.get(a!.id)!;
    // A mutable column changes: the next pass sees it; the spec part is the same as before.
    expect(a!.desired).toBe('run');
    tasks.update({ ...taskA, desired: 'cancel' }, 'QUEUED');
    const second = tasks.queuedForScheduling();
    expect(second.map((t) => [t.id, t.desired])).toEqual([
      [a!.id, 'cancel'],
      [b!.id, 'run'],
    ]);
    expect(second[0]!.spec).toEqual(a!.spec);

    // A task that leaves the queue is no longer listed (nor remembered).
    tasks.update({ ...tasks.get(b!.id)!, state: 'CANCELLED', finished_at: 1 }, 'QUEUED');
    expect(tasks.queuedForScheduling().map((t) => t.id)).toEqual([a!.id]);
  });

  it('keeps an unchanged task the same object between reads, even written, so that a pass can cache by it', async () => {
    const c = await enrolledCluster([1, 2, 3]);
    f = c.f;
    const tasks = f.deps.store.tasks;
    const [a, b, d] = tasks.queuedForScheduling();
    // b is written without change (an update of a column scheduling does not read), d leaves the queue.
    tasks.update({ ...tasks.get(b!.id)!, updated_at: 123 }, 'QUEUED');
    tasks.update({ ...tasks.get(d!.id)!, state: 'CANCELLED', finished_at: 1 }, 'QUEUED');
    const next = tasks.queuedForScheduling();
    expect(next).toHaveLength(2);
    expect(next[0]).toBe(a);
    expect(next[1]).toBe(b);
    // A change scheduling reads makes a new row.
    tasks.update({ ...tasks.get(a!.id)!, desired: 'cancel' }, 'QUEUED');
    const last = tasks.queuedForScheduling();
    expect(last[0]).not.toBe(a);
    expect(last[0]!.desired).toBe('cancel');
    expect(last[1]).toBe(b);
  });
});
