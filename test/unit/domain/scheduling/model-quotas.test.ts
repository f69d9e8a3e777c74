import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  AccountView,
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
 * Quotas per account and card model (ADR 0048; decide's step 4c, reclaim): a task goes to a model its
 * account line has room on; with none left it waits with a reason naming the model, what is held and when
 * it frees or resets. The account-wide quota still applies beside them.
 */

const H100 = 'NVIDIA H100 80GB HBM3';
const A100 = 'NVIDIA A100-SXM4-80GB';

/** A worker of 4 cards of `model`, those in `leased` held. */
function worker(id: string, model: string, leased: readonly number[] = []): WorkerView {
  const w = simWorkerView(id, leased, 4);
  return { ...w, cards: w.cards.map((c) => ({ ...c, model })) };
}

const task = (id: string, account: string, count = 1, model?: string): QueuedTaskView => ({
  task_id: id,
  owner: `${account}-agent`,
  account,
  priority: 0,
  approved_at: 900,
  cards: { count, ...(model === undefined ? {} : { model }) },
});

const quota = modelQuotaView;

const account = accountView;

/** w1: 4 H100s, w2: 4 A100s (w1 first in best fit's ties); the accounts as given under root. */
function snapshot(
  tasks: QueuedTaskView[],
  accounts: Record<string, AccountView>,
  over: Partial<SchedulingSnapshot> = {},
): SchedulingSnapshot {
  return {
    tasks,
    workers: [worker('w1', H100), worker('w2', A100)],
    running_cards_by_owner: {},
    fair_share: {
      total_cards: 8,
      accounts: { root: { share: 1, usage: 0, running_cards: 0, parent: null }, ...accounts },
    },
    config: SCHEDULING_CONFIG,
    ...over,
  };
}

describe('quotas per card model in a pass', () => {
  it('places a task that may take either model on the one its account has room on', () => {
    const free = decide(snapshot([task('t1', 'team-a')], { 'team-a': account({}) }), 1000);
    expect(free.grants.map((g) => g.worker_id)).toEqual(['w1']);
    const full = decide(
      snapshot(
        [task('t1', 'team-a')],
        {
          'team-a': account({
            model_quotas: [quota('H100', { nominal_cards: 2, borrowing_limit: 0 })],
            running_by_model: { [H100]: 2 },
            running_cards: 2,
          }),
        },
        { workers: [worker('w1', H100, [0, 1]), worker('w2', A100)] },
      ),
      1000,
    );
    expect(full.grants.map((g) => g.worker_id)).toEqual(['w2']);
  });

  it('a task that can only go to a full model waits, naming the model, what is held and what frees it', () => {
    const d = decide(
      snapshot(
        [task('t1', 'team-a', 1, 'H100')],
        {
          'team-a': account({
            model_quotas: [quota('H100', { nominal_cards: 4, borrowing_limit: 2 })],
            running_by_model: { [H100]: 6 },
            running_cards: 6,
          }),
        },
        { workers: [worker('w1', H100), worker('w2', A100)] },
      ),
      1000,
    );
    expect(d.grants).toEqual([]);
    expect(d.waiting[0]!.reason).toMatchObject({
      code: 'account_quota_exceeded',
      account: 'team-a',
      model: 'H100',
      nominal: 4,
      borrowing_limit: 2,
      held: 6,
      need: 1,
    });
    expect(d.waiting[0]!.reason.message).toMatch(
      /^team-a holds 6 of its 4 nominal \+ 2 borrowing H100 cards; 1 more would pass it.*Frees when one of its H100 tasks ends/,
    );
    expect(d.waiting[0]!.reason.message).toContain(
      'gpu-broker account set team-a --model H100 --nominal/--borrow',
    );
  });

  it('the command a wait reason suggests quotes a model name with a space (one shell word)', () => {
    const d = decide(
      snapshot(
        [task('t1', 'team-a', 1, 'Simulated GPU')],
        {
          'team-a': account({
            model_quotas: [quota('Simulated GPU', { nominal_cards: 1, borrowing_limit: 0 })],
            running_by_model: { 'simulated gpu': 1 },
            running_cards: 1,
          }),
        },
        { workers: [worker('w1', 'Simulated GPU (sim)')] },
      ),
      1000,
    );
    expect(d.waiting[0]!.reason.message).toContain(
      "gpu-broker account set team-a --model 'Simulated GPU' --nominal/--borrow",
    );
  });

  it('counts this pass’s grants per model, and a parent’s model quota holds its children', () => {
    const d = decide(
      snapshot(
        [task('t1', 'team-a', 1, 'H100'), task('t2', 'team-a', 1, 'H100'), task('t3', 'team-a', 1, 'H100')],
        {
          'team-a': account({ model_quotas: [quota('H100', { nominal_cards: 1, borrowing_limit: 1 })] }),
        },
      ),
      1000,
    );
    expect(d.grants.map((g) => g.task_id)).toEqual(['t1', 't2']);
    expect(d.waiting.map((w) => [w.task_id, w.reason.code])).toEqual([['t3', 'account_quota_exceeded']]);

    const tree = decide(
      snapshot([task('t1', 'team-a', 1, 'H100'), task('b1', 'team-b', 1)], {
        org: account({ model_quotas: [quota('h100', { nominal_cards: 2, borrowing_limit: 0 })] }),
        'team-a': account({ parent: 'org', running_by_model: { [H100]: 1 }, running_cards: 1 }),
        'team-b': account({ parent: 'org', running_by_model: { [H100]: 1 }, running_cards: 1 }),
      }),
      1000,
    );
    expect(tree.waiting.find((w) => w.task_id === 't1')?.reason).toMatchObject({
      account: 'org',
      model: 'h100',
    });
    // team-b's task may take an A100: it goes there.
    expect(tree.grants).toEqual([{ task_id: 'b1', worker_id: 'w2', card_indexes: [0] }]);
  });

  it('a spent model budget keeps the account off that model until it resets; other accounts are not held', () => {
    const resets = Date.UTC(2026, 11, 7);
    const spent = {
      model_quotas: [
        quota('H100', { budget: { limit_card_seconds: 3600, used_card_seconds: 3600, resets_at: resets } }),
      ],
    };
    const d = decide(
      snapshot([task('t1', 'team-a', 1, 'H100'), task('t2', 'team-a', 1), task('b1', 'team-b', 1, 'H100')], {
        'team-a': account(spent),
        'team-b': account({}),
      }),
      1000,
    );
    expect(d.waiting.map((w) => w.task_id)).toEqual(['t1']);
    expect(d.waiting[0]!.reason).toMatchObject({
      code: 'account_budget_exhausted',
      model: 'H100',
      resets_at: resets,
    });
    expect(d.waiting[0]!.reason.message).toContain('resets at 2026-12-07T00:00:00Z');
    expect(Object.fromEntries(d.grants.map((g) => [g.task_id, g.worker_id]))).toEqual({ t2: 'w2', b1: 'w1' });
  });

  it('a task cannot dodge a model quota by naming the card another way: the quota counts the card’s model', () => {
    const d = decide(
      snapshot([task('t1', 'team-a', 1, '80GB HBM3'), task('t2', 'team-a', 1, 'nvidia')], {
        'team-a': account({
          model_quotas: [quota('H100', { nominal_cards: 1, borrowing_limit: 0 })],
          running_by_model: { [H100]: 1 },
          running_cards: 1,
        }),
      }),
      1000,
    );
    expect(d.waiting.map((w) => [w.task_id, w.reason.code])).toEqual([['t1', 'account_quota_exceeded']]);
    // "nvidia" fits both models: it takes the A100.
    expect(d.grants).toEqual([{ task_id: 't2', worker_id: 'w2', card_indexes: [0] }]);
  });

  it('the account-wide quota still applies beside the model quotas', () => {
    const d = decide(
      snapshot([task('t1', 'team-a', 1, 'A100')], {
        'team-a': account({
          nominal_cards: 1,
          borrowing_limit: 0,
          running_cards: 1,
          model_quotas: [quota('A100', { nominal_cards: 4, borrowing_limit: 0 })],
          running_by_model: { [H100]: 1 },
        }),
      }),
      1000,
    );
    expect(d.waiting[0]!.reason.code).toBe('account_quota_exceeded');
    expect(d.waiting[0]!.reason).not.toHaveProperty('model');
  });

  it('a task kept off a full model that waits for the other model’s cards says both', () => {
    const d = decide(
      snapshot(
        [task('t1', 'team-a', 1)],
        {
          'team-a': account({
            model_quotas: [quota('H100', { nominal_cards: 1, borrowing_limit: 0 })],
            running_by_model: { [H100]: 1 },
            running_cards: 1,
          }),
        },
        { workers: [worker('w1', H100, [0]), worker('w2', A100, [0, 1, 2, 3])] },
      ),
      1000,
    );
    expect(d.waiting[0]!.reason.code).toBe('waiting_for_cards');
    expect(d.waiting[0]!.reason.message).toContain(
      'team-a holds 1 of its 1 nominal + 0 borrowing H100 cards',
    );
  });

  it('with no model quota anywhere, decides exactly as before', () => {
    const tasks = [task('t1', 'team-a', 2), task('t2', 'team-b', 3, 'A100'), task('t3', 'team-a', 4, 'H100')];
    const plain = { 'team-a': account({}), 'team-b': account({}) };
    const empty = { 'team-a': account({ model_quotas: [] }), 'team-b': account({ running_by_model: {} }) };
    expect(decide(snapshot(tasks, empty), 1000)).toEqual(decide(snapshot(tasks, plain), 1000));
  });
});

describe('a pass never takes an account line past a model quota', () => {
  it('whatever the tasks, quotas and cards held: granted H100s stay within every H100 limit of the line', () => {
    const limit = fc.record({
      nominal: fc.integer({ min: 0, max: 4 }),
      borrowing: fc.integer({ min: 0, max: 3 }),
    });
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            account: fc.constantFrom('team-a', 'team-b'),
            count: fc.constantFrom(1, 2, 3),
            model: fc.constantFrom(undefined, 'H100', 'A100', 'NVIDIA'),
          }),
          { minLength: 1, maxLength: 12 },
        ),
        limit,
        limit,
        fc.integer({ min: 0, max: 3 }),
        (asks, orgLimit, aLimit, heldByA) => {
          const tasks = asks.map((a, i) => task(`t${i}`, a.account, a.count, a.model));
          const held = [0, 1, 2, 3].slice(0, heldByA);
          const d = decide(
            snapshot(
              tasks,
              {
                org: account({
                  model_quotas: [
                    quota('H100', { nominal_cards: orgLimit.nominal, borrowing_limit: orgLimit.borrowing }),
                  ],
                }),
                'team-a': account({
                  parent: 'org',
                  running_cards: heldByA,
                  running_by_model: { [H100]: heldByA },
                  model_quotas: [
                    quota('h100', { nominal_cards: aLimit.nominal, borrowing_limit: aLimit.borrowing }),
                  ],
                }),
                'team-b': account({ parent: 'org' }),
              },
              { workers: [worker('w1', H100, held), worker('w2', A100)] },
            ),
            1000,
          );
          const accountOf = new Map(tasks.map((t) => [t.task_id, t.account]));
          let a = heldByA;
          let org = heldByA;
          for (const g of d.grants) {
            if (g.worker_id !== 'w1') continue;
            org += g.card_indexes.length;
            if (accountOf.get(g.task_id) === 'team-a') a += g.card_indexes.length;
          }
          // A line already over its limit gets no H100 at all; one below it never passes it.
          if (org > heldByA) expect(org).toBeLessThanOrEqual(orgLimit.nominal + orgLimit.borrowing);
          if (a > heldByA) expect(a).toBeLessThanOrEqual(aLimit.nominal + aLimit.borrowing);
          // Every task waits with a reason, or is granted.
          expect(d.grants.length + d.waiting.length).toBe(tasks.length);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('reclaim per card model', () => {
  /** w1's 4 H100s held by team-a (2 leases of 2, preemptible); w2's A100s held by someone else. */
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
  const busy = (teamA: Partial<AccountView>, teamB: Partial<AccountView>) =>
    snapshot(
      [task('b1', 'team-b', 2, 'H100')],
      {
        'team-a': account({ running_cards: 4, running_by_model: { [H100]: 4 }, ...teamA }),
        'team-b': account(teamB),
        'team-c': account({ running_cards: 4, running_by_model: { [A100]: 4 } }),
      },
      {
        workers: [worker('w1', H100, [0, 1, 2, 3]), worker('w2', A100, [0, 1, 2, 3])],
        running: [lease(0), lease(1)],
        running_cards_by_owner: { 'team-a-agent': 4, 'team-c-agent': 4 },
      },
    );

  it('an account with a nominal share of a model reclaims it from one borrowing it', () => {
    const d = decide(busy({}, { model_quotas: [quota('H100', { nominal_cards: 2 })] }), 1000);
    expect(d.preemptions.map((p) => [p.task_id, p.for_task_id])).toEqual([['a1', 'b1']]);
    expect(d.waiting[0]!.reason.code).toBe('reclaiming');
  });

  it('never below the victim’s own nominal share of that model, nor beyond the claimant’s', () => {
    const guarded = decide(
      busy(
        { model_quotas: [quota('H100', { nominal_cards: 4 })] },
        { model_quotas: [quota('H100', { nominal_cards: 2 })] },
      ),
      1000,
    );
    expect(guarded.preemptions).toEqual([]);
    const beyond = decide(busy({}, { model_quotas: [quota('H100', { nominal_cards: 1 })] }), 1000);
    expect(beyond.preemptions).toEqual([]);
    // A quota of another model guarantees nothing on H100.
    expect(
      decide(busy({}, { model_quotas: [quota('A100', { nominal_cards: 4 })] }), 1000).preemptions,
    ).toEqual([]);
  });
});
