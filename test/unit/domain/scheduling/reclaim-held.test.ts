import { describe, expect, it } from 'vitest';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type { RunningLeaseView, SchedulingSnapshot } from '../../../../src/domain/scheduling/types.js';
import { accountView, SCHEDULING_CONFIG, simWorkerView } from '../../../support/scheduling-views.js';

/**
 * Reclaim for a task that holds a reservation (decide's steps 6 and 9): the free cards it holds are its
 * already, so it stops only the tasks it still lacks cards for. Found by the hostile review of backfill
 * and model quotas: an aged 4-card claimant holding 2 free cards stopped two 2-card tasks, not one.
 */

const NOW = 1_000;

const lease = (n: number): RunningLeaseView => ({
  task_id: `a${n}`,
  lease_id: `l${n}`,
  lease_epoch: n,
  worker_id: 'w1',
  card_indexes: [2 * n, 2 * n + 1],
  account: 'team-a',
  preemptible: true,
  preemptions: 0,
  granted_at: 100 * (n + 1),
  grace_seconds: 30,
});

const account = accountView;

/** w1: 0-5 held by team-a (3 preemptible leases of 2, borrowing), 6-7 free; team-b (nominal 4) asks 4. */
function snapshot(approvedAt: number): SchedulingSnapshot {
  return {
    workers: [simWorkerView('w1', [0, 1, 2, 3, 4, 5])],
    tasks: [
      {
        task_id: 'b1',
        owner: 'team-b-agent',
        account: 'team-b',
        priority: 0,
        approved_at: approvedAt,
        cards: { count: 4 },
      },
    ],
    running_cards_by_owner: { 'team-a-agent': 6 },
    running: [0, 1, 2].map(lease),
    fair_share: {
      total_cards: 8,
      accounts: {
        root: { share: 1, usage: 0, running_cards: 0, parent: null },
        'team-a': account({ running_cards: 6 }),
        'team-b': account({ nominal_cards: 4 }),
      },
    },
    config: SCHEDULING_CONFIG,
  };
}

describe('reclaim for a task holding a reservation', () => {
  it('stops only what it lacks beyond the free cards it holds', () => {
    const d = decide(snapshot(NOW - 3_600_000), NOW);
    expect(d.reservations).toEqual([{ task_id: 'b1', worker_id: 'w1', card_indexes: [6, 7] }]);
    expect(d.preemptions.map((p) => p.card_indexes)).toEqual([[4, 5]]);
    expect(d.waiting[0]!.reason).toMatchObject({ code: 'reclaiming', cards: 2 });
  });

  it('a fresh task (no reservation) stops the same: the free cards are open to it', () => {
    const d = decide(snapshot(NOW - 1_000), NOW);
    expect(d.reservations).toEqual([]);
    expect(d.preemptions.map((p) => p.card_indexes)).toEqual([[4, 5]]);
  });
});
