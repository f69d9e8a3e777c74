import { describe, expect, it } from 'vitest';
import { type CardMig, migCardIndex } from '../../../../src/contracts/sample.js';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  AccountView,
  CardView,
  QueuedTaskView,
  RunningLeaseView,
  SchedulingSnapshot,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';
import {
  accountView,
  modelQuotaView,
  SCHEDULING_CONFIG,
  simWorkerView,
} from '../../../support/scheduling-views.js';

/**
 * A hostile review of quotas per card model (ADR 0048) in the pass: a task cannot dodge a full model by
 * asking for MIG slices of it, by backfilling into a reservation on it, or through a child's quota spelled
 * another way; a quota of an account the view does not know, a task of no account and a parent cycle in
 * the view neither throw nor hang.
 */

const H100 = 'NVIDIA H100 80GB HBM3';
const A100 = 'NVIDIA A100-SXM4-80GB';
const NOW = 1_000;
const MIN = 60_000;

function worker(id: string, model: string, leased: readonly number[] = [], count = 4): WorkerView {
  const w = simWorkerView(id, leased, count);
  return { ...w, cards: w.cards.map((c) => ({ ...c, model })) };
}

/** An H100 in MIG mode (card 0) split into two 3g.40gb slices, the first `leasedSlices` of them leased. */
function migWorker(id: string, leasedSlices: number): WorkerView {
  const base = worker(id, H100, [], 1);
  const parent: CardView = { ...base.cards[0]!, mig_mode: 'enabled' };
  const slices = [1, 2].map((gi): CardView => {
    const mig: CardMig = {
      parent_index: 0,
      parent_uuid: 'GPU-0',
      profile: '3g.40gb',
      gpu_instance_profile: '3g.40gb',
      gpu_instance: gi,
      compute_instance: 0,
      compute_slices: 3,
      gi_access_minor: 3 + 9 * gi,
      ci_access_minor: 4 + 9 * gi,
      memory_source: 'instance',
    };
    return {
      ...parent,
      mig_mode: undefined,
      index: migCardIndex(0, gi, 0),
      memory_total_mib: 40448,
      mig,
      leased: gi <= leasedSlices,
    };
  });
  return { ...base, cards: [parent, ...slices] };
}

const task = (
  id: string,
  account: string | undefined,
  cards: QueuedTaskView['cards'] = { count: 1 },
  over: Partial<QueuedTaskView> = {},
): QueuedTaskView => ({
  task_id: id,
  owner: `${account ?? 'nobody'}-agent`,
  ...(account === undefined ? {} : { account }),
  priority: 0,
  approved_at: 900,
  cards,
  ...over,
});

const quota = modelQuotaView;

const account = accountView;

function snapshot(
  tasks: QueuedTaskView[],
  workers: WorkerView[],
  accounts: Record<string, AccountView>,
): SchedulingSnapshot {
  return {
    tasks,
    workers,
    running_cards_by_owner: {},
    fair_share: {
      total_cards: 8,
      accounts: { root: { share: 1, usage: 0, running_cards: 0, parent: null }, ...accounts },
    },
    config: SCHEDULING_CONFIG,
  };
}

/** team-a holding 1 H100 (a slice counts as one card of its parent's model) of a 1 + 0 quota. */
const fullOnH100 = (over: Partial<AccountView> = {}) =>
  account({
    model_quotas: [quota('H100', { nominal_cards: 1, borrowing_limit: 0 })],
    running_by_model: { [H100]: 1 },
    running_cards: 1,
    ...over,
  });

describe('model quota attacks (ADR 0048)', () => {
  it('asking for MIG slices of a full model does not dodge its quota (a slice carries its card’s model)', () => {
    for (const cards of [
      { count: 1, allow_mig: true },
      { count: 1, mig_profile: '3g.40gb' },
    ]) {
      const d = decide(
        snapshot([task('t1', 'team-a', cards)], [migWorker('w1', 1)], { 'team-a': fullOnH100() }),
        NOW,
      );
      expect(d.grants, JSON.stringify(cards)).toEqual([]);
      expect(d.waiting[0]!.reason).toMatchObject({ code: 'account_quota_exceeded', model: 'H100' });
      // Control: with room on H100 the free slice is granted.
      const room = decide(
        snapshot([task('t1', 'team-a', cards)], [migWorker('w1', 1)], { 'team-a': account({}) }),
        NOW,
      );
      expect(
        room.grants.map((g) => g.card_indexes),
        JSON.stringify(cards),
      ).toEqual([[migCardIndex(0, 2, 0)]]);
    }
  });

  it('a task of a full model does not backfill into an aged task’s held card of that model', () => {
    // w1: 4 H100s, 0-1 leased ending in 30 min, 2-3 free; 'big' (team-b, aged) holds 2-3. team-a's
    // 1-minute task would fit the shadow, but its account is full on H100.
    const w = worker('w1', H100, [0, 1]);
    const w1 = {
      ...w,
      cards: w.cards.map((c) => (c.leased ? { ...c, lease_ends_by: NOW + 30 * MIN } : c)),
    };
    const tasks = [
      task('big', 'team-b', { count: 4 }, { approved_at: NOW - 20 * MIN }),
      task('small', 'team-a', { count: 1 }, { time_limit_seconds: 60 }),
    ];
    const full = decide(snapshot(tasks, [w1], { 'team-a': fullOnH100(), 'team-b': account({}) }), NOW);
    expect(full.grants).toEqual([]);
    expect(full.waiting.find((x) => x.task_id === 'small')!.reason.code).toBe('account_quota_exceeded');
    // Control: with room on H100 the same task backfills.
    const room = decide(snapshot(tasks, [w1], { 'team-a': account({}), 'team-b': account({}) }), NOW);
    expect(room.grants.map((g) => g.task_id)).toEqual(['small']);
  });

  it('a child’s quota spelled another way does not lift its parent’s: the parent’s H100 quota still holds it', () => {
    const d = decide(
      snapshot(
        [task('t1', 'team-a', { count: 1, model: 'H100' })],
        [worker('w1', H100), worker('w2', A100)],
        {
          org: account({
            model_quotas: [quota('H100', { nominal_cards: 1, borrowing_limit: 0 })],
            running_by_model: { [H100]: 1 },
            running_cards: 1,
          }),
          'team-a': account({
            parent: 'org',
            model_quotas: [quota('NVIDIA H100', { nominal_cards: 100, borrowing_limit: 0 })],
          }),
        },
      ),
      NOW,
    );
    expect(d.grants).toEqual([]);
    expect(d.waiting[0]!.reason).toMatchObject({ code: 'account_quota_exceeded', account: 'org' });
  });

  it('reclaim never stops tasks on a model the claimant’s own quota keeps it off (budget spent there)', () => {
    // team-b has a nominal share of 2 H100s but spent its H100 budget: its any-model task may only take
    // A100s, all held by team-c (not preemptible). team-a borrows w1's H100s with preemptible tasks:
    // stopping them would free cards the claimant may not take.
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
    const teamB = (budget: boolean) =>
      account({
        model_quotas: [
          quota('H100', {
            nominal_cards: 2,
            budget: budget
              ? { limit_card_seconds: 3600, used_card_seconds: 3600, resets_at: NOW + MIN }
              : null,
          }),
        ],
      });
    const s = (budget: boolean): SchedulingSnapshot => ({
      ...snapshot(
        [task('b1', 'team-b', { count: 2 })],
        [worker('w1', H100, [0, 1, 2, 3]), worker('w2', A100, [0, 1, 2, 3])],
        {
          'team-a': account({ running_cards: 4, running_by_model: { [H100]: 4 } }),
          'team-b': teamB(budget),
          'team-c': account({ running_cards: 4, running_by_model: { [A100]: 4 } }),
        },
      ),
      running: [lease(0), lease(1)],
      running_cards_by_owner: { 'team-a-agent': 4, 'team-c-agent': 4 },
    });
    const spent = decide(s(true), NOW);
    expect(spent.preemptions).toEqual([]);
    expect(spent.waiting[0]!.reason.message).toContain('H100 card-hours');
    // Control: with budget left it reclaims one of team-a's H100 leases.
    expect(decide(s(false), NOW).preemptions.map((p) => p.for_task_id)).toEqual(['b1']);
  });

  it('a task asking more H100s than its quota ever allows is told it cannot start until the quota is raised', () => {
    for (const [nominal, borrowing, need] of [
      [0, 0, 1],
      [2, 1, 4],
    ] as const) {
      const d = decide(
        snapshot([task('t1', 'team-a', { count: need, model: 'H100' })], [worker('w1', H100)], {
          'team-a': account({
            model_quotas: [quota('H100', { nominal_cards: nominal, borrowing_limit: borrowing })],
          }),
        }),
        NOW,
      );
      expect(d.grants).toEqual([]);
      expect(d.waiting[0]!.reason).toMatchObject({ code: 'account_quota_exceeded', model: 'H100', need });
      expect(d.waiting[0]!.reason.message).toContain('more than account team-a may ever hold');
      expect(d.waiting[0]!.reason.message).toContain('gpu-broker account set team-a --model H100');
    }
  });

  it('a quota of an account the view lacks, a task of no account or of an unknown one, and a parent cycle neither throw nor hang', () => {
    const d = decide(
      snapshot(
        [
          task('none', undefined),
          task('ghost', 'deleted-team'),
          task('loop', 'a', { count: 1, model: 'H100' }),
          task('loop-any', 'b'),
        ],
        [worker('w1', H100, [0]), worker('w2', A100)],
        {
          // A cycle the tree refuses, but a bad row must not hang the pass: a ↔ b.
          a: account({
            parent: 'b',
            model_quotas: [quota('H100', { nominal_cards: 1, borrowing_limit: 0 })],
            running_by_model: { [H100]: 1 },
            running_cards: 1,
          }),
          b: account({ parent: 'a' }),
        },
      ),
      NOW,
    );
    const granted = new Map(d.grants.map((g) => [g.task_id, g.worker_id]));
    expect(granted.has('none')).toBe(true);
    expect(granted.has('ghost')).toBe(true);
    // 'a' is full on H100 and the task may only take H100s; 'b' sits under 'a', so it is kept off H100s.
    expect(granted.has('loop')).toBe(false);
    expect(granted.get('loop-any')).toBe('w2');
  });
});
