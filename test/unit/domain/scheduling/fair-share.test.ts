import { describe, expect, it } from 'vitest';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  CardView,
  FairShareView,
  QueuedTaskView,
  SchedulingConfig,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';

/**
 * Fair share across accounts (src/domain/scheduling/fair-order.ts), driven through decide() on a
 * simulated clock: accounts submit without pause onto 16 cards, leases end when their tasks do, and
 * usage is charged and decayed as the master does (card-seconds per account, a half-life). What a
 * scheduler of a shared pool must give: each account's share of the card-seconds near its weight's share
 * once all are busy, a busy pool, and an 8-card task that still starts within a bounded wait.
 */

const CONFIG: SchedulingConfig = {
  sample_interval_ms: 2000,
  vram_threshold_pct: 2,
  reservation_after_seconds: 600,
  max_concurrent_cards_per_owner: null,
  require_isolation: true,
};
const HALF_LIFE_MS = 3_600_000;
const STEP_MS = 5_000;

function card(index: number, leased: boolean): CardView {
  return {
    index,
    model: 'SIM-GPU',
    memory_used_mib: 0,
    memory_total_mib: 81559,
    health: 'ok',
    health_reasons: [],
    processes: [],
    simulated: true,
    cordoned: false,
    leased,
    quarantined: false,
    broker_pids: [],
  };
}

interface Running {
  task: QueuedTaskView;
  worker: string;
  cards: number[];
  started: number;
  ends: number;
}

/** A small deterministic generator (the test must not depend on Math.random). */
function lcg(seed: number) {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

/**
 * Runs `hours` of simulated time with `accounts` (name → weight) each keeping `backlog` tasks queued;
 * returns each account's card-seconds in the measured window (after the first quarter) and what waited.
 */
function simulate(
  accounts: Record<string, number>,
  hours: number,
  sizes: readonly number[],
  opts: { backlog?: Record<string, number>; fair?: boolean } = {},
) {
  const backlogOf = (a: string) => opts.backlog?.[a] ?? 6;
  const rnd = lcg(42);
  const weightSum = Object.values(accounts).reduce((n, w) => n + w, 0);
  const shares = Object.fromEntries(Object.entries(accounts).map(([a, w]) => [a, w / weightSum]));
  const leased = { w1: new Set<number>(), w2: new Set<number>() };
  const queued: QueuedTaskView[] = [];
  const running: Running[] = [];
  const charges: Array<{ account: string; ended: number; cardSeconds: number }> = [];
  const used: Record<string, number> = Object.fromEntries(Object.keys(accounts).map((a) => [a, 0]));
  const eightCardWaits: number[] = [];
  let seq = 0;
  let busyCardMs = 0;
  const end = hours * 3_600_000;
  const measureFrom = end / 4;
  for (let now = 0; now < end; now += STEP_MS) {
    // Leases end: cards free, usage charged (and counted in the window when it ran within it).
    for (const r of running.filter((x) => x.ends <= now)) {
      running.splice(running.indexOf(r), 1);
      for (const c of r.cards) leased[r.worker as 'w1' | 'w2'].delete(c);
      charges.push({
        account: r.task.account!,
        ended: r.ends,
        cardSeconds: (r.cards.length * (r.ends - r.started)) / 1000,
      });
    }
    for (const r of running) {
      const from = Math.max(now - STEP_MS, measureFrom, r.started);
      if (now > from) {
        used[r.task.account!] = (used[r.task.account!] ?? 0) + (r.cards.length * (now - from)) / 1000;
        busyCardMs += r.cards.length * (now - from);
      }
    }
    // Every account keeps its backlog.
    for (const account of Object.keys(accounts))
      while (queued.filter((t) => t.account === account).length < backlogOf(account)) {
        seq++;
        queued.push({
          task_id: `t${String(seq).padStart(6, '0')}`,
          owner: `${account}-agent`,
          account,
          priority: 0,
          approved_at: now,
          cards: { count: sizes[Math.floor(rnd() * sizes.length)]! },
        });
      }
    const fair: FairShareView = {
      total_cards: 16,
      accounts: Object.fromEntries(
        Object.keys(accounts).map((a) => [
          a,
          {
            share: shares[a]!,
            usage: charges
              .filter((c) => c.account === a)
              .reduce((n, c) => n + c.cardSeconds * 2 ** (-(now - c.ended) / HALF_LIFE_MS), 0),
            running_cards: running
              .filter((r) => r.task.account === a)
              .reduce((n, r) => n + r.cards.length, 0),
          },
        ]),
      ),
    };
    const workers: WorkerView[] = (['w1', 'w2'] as const).map((id) => ({
      worker_id: id,
      online: true,
      draining: false,
      sampled_at: now,
      sampler_error: null,
      isolation: 'bwrap',
      container_engine: null,
      cards: Array.from({ length: 8 }, (_, i) => card(i, leased[id].has(i))),
    }));
    // Without fair share: no account on the views, one queue for everyone (first come, as before).
    const tasks = opts.fair === false ? queued.map((t) => ({ ...t, account: undefined })) : queued;
    const d = decide(
      {
        workers,
        tasks,
        running_cards_by_owner: {},
        fair_share: opts.fair === false ? undefined : fair,
        config: CONFIG,
      },
      now,
    );
    for (const g of d.grants) {
      const t = queued.splice(
        queued.findIndex((q) => q.task_id === g.task_id),
        1,
      )[0]!;
      for (const c of g.card_indexes) leased[g.worker_id as 'w1' | 'w2'].add(c);
      // 2 to 10 minutes, whole steps.
      const duration = (24 + Math.floor(rnd() * 97)) * STEP_MS;
      running.push({
        task: t,
        worker: g.worker_id,
        cards: [...g.card_indexes],
        started: now,
        ends: now + duration,
      });
      if (t.cards.count === 8 && now >= measureFrom) eightCardWaits.push(now - t.approved_at);
    }
  }
  const total = Object.values(used).reduce((n, x) => n + x, 0);
  return {
    shares: Object.fromEntries(Object.entries(used).map(([a, x]) => [a, x / total])),
    utilisation: busyCardMs / (16 * (end - measureFrom)),
    eightCardWaits,
  };
}

describe('fair share across accounts (simulated pool of 16 cards)', () => {
  it('three accounts weighted 1:1:2, each submitting alike: fair share moves the card-seconds toward 25/25/50 %, first come leaves them near a third each', () => {
    const fair = simulate({ a: 1, b: 1, c: 2 }, 24, [1, 2, 4, 8]);

    const fifo = simulate({ a: 1, b: 1, c: 2 }, 24, [1, 2, 4, 8], { fair: false });
    // Recorded (docs/performance.md "Fair share"): fair 0.275 / 0.268 / 0.457, first come 0.338 / 0.346 / 0.316.
    expect(fifo.shares['c']).toBeLessThan(0.38);
    expect(fair.shares['c']).toBeGreaterThan(0.43);
    for (const a of ['a', 'b'] as const) {
      expect(fair.shares[a]).toBeLessThan(0.3);
      expect(fair.shares[a]).toBeGreaterThan(0.2);
    }
    // Every account still runs its 8-card tasks.
    expect(fair.eightCardWaits.length).toBeGreaterThan(0);
  });

  it('equal weights, one account queueing three times as much: fair share keeps both near half', () => {
    const backlog = { a: 4, b: 12 };
    const fair = simulate({ a: 1, b: 1 }, 12, [1, 2], { backlog });
    const fifo = simulate({ a: 1, b: 1 }, 12, [1, 2], { backlog, fair: false });
    expect(Math.abs(fair.shares['a']! - 0.5)).toBeLessThan(0.05);
    expect(fifo.shares['a']).toBeLessThan(0.35);
  });

  it('one account alone orders exactly as before: priority, then age', () => {
    const alone = simulate({ a: 1 }, 2, [1, 2, 4, 8]);
    const before = simulate({ a: 1 }, 2, [1, 2, 4, 8], { fair: false });
    expect(alone).toEqual(before);
  });
});

describe('a waiting task is told where its account stands', () => {
  it('names its account, the cards it holds against its share, its level and its place in the account’s queue', () => {
    const workers: WorkerView[] = [
      {
        worker_id: 'w1',
        online: true,
        draining: false,
        sampled_at: 1_000,
        sampler_error: null,
        isolation: 'bwrap',
        container_engine: null,
        cards: [card(0, true), card(1, true)],
      },
    ];
    const t = (id: string, account: string): QueuedTaskView => ({
      task_id: id,
      owner: `${account}-agent`,
      account,
      priority: 0,
      approved_at: 900,
      cards: { count: 1 },
    });
    const d = decide(
      {
        workers,
        tasks: [t('t1', 'a'), t('t2', 'a'), t('t3', 'b')],
        running_cards_by_owner: { 'a-agent': 2 },
        fair_share: {
          total_cards: 2,
          accounts: {
            a: { share: 0.5, usage: 0, running_cards: 2 },
            b: { share: 0.5, usage: 0, running_cards: 0 },
          },
        },
        config: CONFIG,
      },
      1_000,
    );
    const byId = new Map(d.waiting.map((w) => [w.task_id, w.reason]));
    // b holds nothing: it is served first.
    expect(d.waiting.map((w) => w.task_id)).toEqual(['t3', 't1', 't2']);
    const second = byId.get('t2')!;
    expect(second.code).toBe('waiting_for_cards');
    expect(second).toMatchObject({
      fair_share: { account: 'a', held_cards: 2, share_cards: 1, level: 2, position_in_account: 2 },
    });
    expect(second.message).toContain(
      "Fair share: account a holds 2 card(s) against a share of 1 (level 2; accounts with a lower level are served first); this task is 2nd in a's queue.",
    );
    // One account alone: no note, the reason as before.
    const alone = decide(
      { workers, tasks: [t('t4', 'a')], running_cards_by_owner: {}, config: CONFIG },
      1_000,
    );
    expect(alone.waiting[0]!.reason).not.toHaveProperty('fair_share');
  });
});

describe('account quotas in a pass', () => {
  const workers = (leased: number[] = []): WorkerView[] => [
    {
      worker_id: 'w1',
      online: true,
      draining: false,
      sampled_at: 1_000,
      sampler_error: null,
      isolation: 'bwrap',
      container_engine: null,
      cards: Array.from({ length: 8 }, (_, i) => card(i, leased.includes(i))),
    },
  ];
  const t = (id: string, account: string, count = 1): QueuedTaskView => ({
    task_id: id,
    owner: `${account}-agent`,
    account,
    priority: 0,
    approved_at: 900,
    cards: { count },
  });
  const view = (over: Partial<FairShareView['accounts'][string]> = {}) => ({
    share: 0.5,
    usage: 0,
    running_cards: 0,
    parent: 'org',
    nominal_cards: null,
    borrowing_limit: null,
    budget: null,
    ...over,
  });

  it('holds an account to nominal + borrowing, counting this pass’s grants and its children’s cards', () => {
    const d = decide(
      {
        workers: workers([0]),
        tasks: [t('a1', 'team-a', 2), t('a2', 'team-a', 2), t('b1', 'team-b', 2), t('b2', 'team-b', 2)],
        running_cards_by_owner: { 'team-a-agent': 1 },
        fair_share: {
          total_cards: 8,
          accounts: {
            root: { share: 1, usage: 0, running_cards: 0, parent: null },
            // org may hold 5: team-a's one running card counts for it too.
            org: view({ share: 1, parent: 'root', nominal_cards: 4, borrowing_limit: 1 }),
            'team-a': view({ running_cards: 1, nominal_cards: 2, borrowing_limit: 1 }),
            'team-b': view({ nominal_cards: 2, borrowing_limit: 0 }),
          },
        },
        config: CONFIG,
      },
      1_000,
    );
    // b1 (team-b holds 0 of 2) and a1 (team-a 1 + 2 = 3 of 3) fit; org then holds 5 of 5.
    expect(d.grants.map((g) => g.task_id).sort()).toEqual(['a1', 'b1']);
    const reasons = new Map(d.waiting.map((w) => [w.task_id, w.reason]));
    expect(reasons.get('a2')).toMatchObject({
      code: 'account_quota_exceeded',
      account: 'team-a',
      held: 3,
      limit: 3,
    });
    expect(reasons.get('b2')).toMatchObject({
      code: 'account_quota_exceeded',
      account: 'team-b',
      held: 2,
      limit: 2,
    });
    expect(reasons.get('a2')!.message).toContain(
      'Account team-a holds 3 cards of its 3 (nominal 2 + borrowing 1)',
    );
  });

  it('a task never fitting its account’s quota says so; a spent budget waits until it resets', () => {
    const resets = Date.parse('2026-12-07T00:00:00Z');
    const d = decide(
      {
        workers: workers(),
        tasks: [t('big', 'team-a', 4), t('c1', 'team-c')],
        running_cards_by_owner: {},
        fair_share: {
          total_cards: 8,
          accounts: {
            'team-a': view({ parent: null, nominal_cards: 2, borrowing_limit: 1 }),
            'team-c': view({
              parent: null,
              budget: { limit_card_seconds: 3600, used_card_seconds: 3700, resets_at: resets },
            }),
          },
        },
        config: CONFIG,
      },
      1_000,
    );
    expect(d.grants).toEqual([]);
    const reasons = new Map(d.waiting.map((w) => [w.task_id, w.reason]));
    expect(reasons.get('big')!.message).toContain(
      'more than account team-a may ever hold (nominal 2 + borrowing 1)',
    );
    expect(reasons.get('c1')).toMatchObject({
      code: 'account_budget_exhausted',
      account: 'team-c',
      budget_card_hours: 1,
      used_card_hours: 1.03,
      resets_at: resets,
    });
    expect(reasons.get('c1')!.message).toContain('resets at 2026-12-07T00:00:00Z');
  });
});
