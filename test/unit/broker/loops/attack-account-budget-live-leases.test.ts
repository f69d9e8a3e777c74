import { afterEach, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { setAccount } from '../../../../src/broker/tools/accounts.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { enrolledCluster, samples, WORKER } from '../../../support/enrolled-cluster.js';
import { validSpec } from '../../../support/spec.js';

/**
 * Attack on account budgets (src/broker/loops/scheduler.ts budgetsUsed): a budget counts only leases that
 * ENDED in the period, so an account whose tasks never end within it is never over budget. An account
 * with a 1 card-hour weekly budget keeps a lease running for 10 hours (10 card-hours, ten times the
 * budget) and still gets a new task granted: every further task of the account starts too, as long as
 * none of the running ones has ended. "A task that started within the budget runs to its end" is
 * documented; admitting new tasks while the live leases already spent the budget many times over is not.
 */
let f: BrokerFixture | undefined;
afterEach(() => f?.close());
let n = 0;
const key = () => `attack-${++n}`;

describe('attack: an account budget ignores its live leases', () => {
  it('a task waits account_budget_exhausted once the running leases alone spent the budget', async () => {
    const c = await enrolledCluster([1]);
    f = c.f;
    const scheduler = new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
    setAccount(f.deps, 'op', { name: 'default', budget_card_hours: 1, budget_period: 'week' });
    expect(scheduler.runPass().grants).toHaveLength(1);
    // Ten hours on, the first lease still runs: 10 card-hours against a budget of 1.
    c.clock.advance(10 * 3_600_000);
    f.deps.cluster.fleet.connected(WORKER, 'boot-0', samples, c.clock.now());
    f.deps.cluster.fleet.sampled(WORKER, samples, null, c.clock.now());
    const alice = f.deps.store.principals.findByName('alice')!;
    const rita = f.deps.store.principals.findByName('rita')!;
    const r = (await f.invoke(alice, 'create_proposal', {
      spec: validSpec({ cards: { count: 1 }, outputs: [] }),
      idempotency_key: key(),
    })) as { proposal_id: string; revision_id: string };
    const ids = { proposal_id: r.proposal_id, revision_id: r.revision_id };
    await f.invoke(alice, 'confirm_revision', { ...ids, idempotency_key: key() });
    await f.invoke(rita, 'submit_review', {
      ...ids,
      decision: 'APPROVE',
      comments: 'ok',
      idempotency_key: key(),
    });
    const d = scheduler.runPass();
    expect(d.grants).toHaveLength(0);
    expect(d.waiting[0]?.reason).toMatchObject({ code: 'account_budget_exhausted', account: 'default' });
  });
});
