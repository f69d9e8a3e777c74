import { afterEach, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { createPrincipal } from '../../../../src/broker/principals.js';
import { createAccount, setAccount } from '../../../../src/broker/tools/accounts.js';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { enrolledCluster } from '../../../support/enrolled-cluster.js';
import { validSpec } from '../../../support/spec.js';

/**
 * Where every account stands (src/broker/tools/account-standing.ts): get_status gives
 * an operator every account (share, cards held against share and quota, card-hours this period, budget
 * left, queued tasks and why the first waits), and every caller its own in words an agent acts on.
 * Four simulated cards; team-b (nominal 2, no borrowing, 10 card-hours a week) fills its quota with
 * bob's two 1-card tasks, team-a (alice) takes the other two cards with a 2-card task and queues a
 * second, and bob's third task waits for team-b's quota.
 */
let f: BrokerFixture | undefined;
afterEach(() => f?.close());

let keys = 0;
async function submit(fx: BrokerFixture, who: Principal, rita: Principal, count: number): Promise<string> {
  const r = (await fx.invoke(who, 'create_proposal', {
    spec: validSpec({ cards: { count }, outputs: [] }),
    idempotency_key: `standing-${++keys}`,
  })) as RevisionResult;
  await fx.invoke(who, 'confirm_revision', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    idempotency_key: `standing-${++keys}`,
  });
  const approved = (await fx.invoke(rita, 'submit_review', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    decision: 'APPROVE',
    comments: 'ok',
    idempotency_key: `standing-${++keys}`,
  })) as { task_id: string };
  return approved.task_id;
}

interface Standing {
  account: string;
  held_cards: number;
  share_cards: number;
  nominal_cards: number | null;
  limit_cards: number | null;
  usage_card_hours: number;
  budget_left_card_hours: number | null;
  queued: number;
  first_wait: { task_id: string | null; code: string; message: string } | null;
  model_quotas: Array<Record<string, unknown>>;
}
interface Status {
  you: {
    model_quotas: Array<Record<string, unknown>>;
    account: string;
    held_cards: number;
    your_cards: number;
    queued: number;
    your_first_queued: { task_id: string; position_in_account: number | null; code: string } | null;
    budget_left_card_hours: number | null;
    words: string;
  };
  accounts?: Standing[];
}

async function scene() {
  const c = await enrolledCluster([]);
  f = c.f;
  const fx = c.f;
  createAccount(fx.deps, 'op', { name: 'team-a' });
  createAccount(fx.deps, 'op', {
    name: 'team-b',
    nominal_cards: 2,
    borrowing_limit: 0,
    budget_card_hours: 10,
    budget_period: 'week',
  });
  const alice = createPrincipal(fx.deps, {
    name: 'ann',
    roles: ['submitter'],
    account: 'team-a',
  }).principal;
  const bob = createPrincipal(fx.deps, { name: 'bob', roles: ['submitter'], account: 'team-b' }).principal;
  const rita = fx.principal('rev', ['reviewer']);
  const ops = fx.principal('ops', ['operator']);
  const scheduler = new Scheduler(fx.deps, fx.deps.cluster.fleet, fx.deps.cluster.link);
  // Queue places and reasons from this scheduler, as the master wires them (src/master/compose.ts).
  Object.assign(fx.deps, { observe: scheduler });
  await submit(fx, bob, rita, 1);
  await submit(fx, bob, rita, 1);
  scheduler.runPass();
  const a1 = await submit(fx, alice, rita, 2);
  const a2 = await submit(fx, alice, rita, 2);
  const b3 = await submit(fx, bob, rita, 1);
  scheduler.runPass();
  // Half an hour on (no pass since: the worker sent nothing meanwhile), team-b's two cards have run
  // 1 card-hour of its week's 10.
  c.clock.advance(30 * 60_000);
  return { fx, alice, bob, rita, ops, a1, a2, b3 };
}

describe('get_status: where each account stands', () => {
  it('an operator sees every account: share, cards against share and quota, use this period, budget left, queue and first reason', async () => {
    const { fx, ops, a2 } = await scene();
    const s = (await fx.invoke(ops, 'get_status', {})) as Status;
    const by = new Map(s.accounts!.map((a) => [a.account, a]));
    expect([...by.keys()].sort()).toEqual(['default', 'root', 'team-a', 'team-b']);
    expect(by.get('team-a')).toMatchObject({
      held_cards: 2,
      share_cards: 1.3,
      nominal_cards: null,
      limit_cards: null,
      budget_left_card_hours: null,
      queued: 1,
      first_wait: { task_id: a2, code: 'waiting_for_cards' },
    });
    const b = by.get('team-b')!;
    expect(b).toMatchObject({ held_cards: 2, nominal_cards: 2, limit_cards: 2, queued: 1 });
    expect(b.first_wait!.code).toBe('account_quota_exceeded');
    expect(b.usage_card_hours).toBeCloseTo(1, 2);
    expect(b.budget_left_card_hours).toBeCloseTo(9, 2);
    // root counts its whole tree.
    expect(by.get('root')).toMatchObject({ held_cards: 4, queued: 2 });
    // A viewer gets the same table, as get_usage gives it every account, but no task ids.
    const viewer = fx.principal('watcher', ['viewer']);
    const v = (await fx.invoke(viewer, 'get_status', {})) as Status;
    const vb = v.accounts!.find((a) => a.account === 'team-b')!;
    expect(vb.held_cards).toBe(2);
    expect(vb.first_wait).toMatchObject({ task_id: null, code: 'account_quota_exceeded' });
  });

  it('an agent reads its own account in words: who is over its share, its task’s place and reason, whose tasks hold its nominal share', async () => {
    const { fx, bob, b3 } = await scene();
    const s = (await fx.invoke(bob, 'get_status', {})) as Status;
    expect(s.accounts).toBeUndefined();
    expect(s.you).toMatchObject({
      account: 'team-b',
      held_cards: 2,
      your_cards: 2,
      queued: 1,
      your_first_queued: { task_id: b3, position_in_account: 1, code: 'account_quota_exceeded' },
    });
    expect(s.you.words).toContain('team-a is over its share (holds 2 of 1.3 cards)');
    expect(s.you.words).toContain(`your task ${b3} is 1st in team-b's queue (account_quota_exceeded)`);
    expect(s.you.words).toContain("team-b's nominal 2 cards are in use by your own tasks");
    expect(s.you.words).toMatch(/9(\.\d+)? card-hours of budget left/);
  });

  it('a submitter or reviewer never gets the other accounts’ table, nor another account’s task ids', async () => {
    const { fx, alice, rita, b3 } = await scene();
    for (const who of [alice, rita]) {
      const s = (await fx.invoke(who, 'get_status', {})) as Status;
      expect(s.accounts).toBeUndefined();
    }
    const a = (await fx.invoke(alice, 'get_status', {})) as Status;
    // ann is in team-a: she reads that team-b is over its share, never bob's task.
    expect(a.you.words).toContain('team-b is over its share (holds 2 of 1.3 cards)');
    expect(a.you.words).not.toContain(b3);
    expect(a.you.words).toContain("is 1st in team-a's queue (waiting_for_cards)");
  });

  it('shows each account’s quotas per card model: the cards of the model held, the limit, use and budget left (ADR 0048)', async () => {
    const { fx, ops, bob } = await scene();
    setAccount(fx.deps, 'op', {
      name: 'team-b',
      model: 'Simulated',
      nominal_cards: 2,
      borrowing_limit: 1,
      budget_card_hours: 5,
      budget_period: 'day',
    });
    const s = (await fx.invoke(ops, 'get_status', {})) as Status;
    const b = s.accounts!.find((a) => a.account === 'team-b')!;
    expect(b.model_quotas).toEqual([
      expect.objectContaining({
        model: 'Simulated',
        held_cards: 2,
        nominal_cards: 2,
        limit_cards: 3,
        period: 'day',
        budget_card_hours: 5,
      }),
    ]);
    expect(b.model_quotas[0]!['usage_card_hours']).toBeCloseTo(1, 2);
    expect(b.model_quotas[0]!['budget_left_card_hours']).toBeCloseTo(4, 2);
    expect(s.accounts!.find((a) => a.account === 'team-a')!.model_quotas).toEqual([]);
    const mine = (await fx.invoke(bob, 'get_status', {})) as Status;
    expect(mine.you.model_quotas).toEqual(b.model_quotas);
    expect(mine.you.words).toMatch(
      /team-b's Simulated cards: holds 2 of its 2 nominal \(may hold 3\), 1(\.\d+)? card-hours this day, 4(\.\d+)? card-hours of budget left/,
    );
  });
});
