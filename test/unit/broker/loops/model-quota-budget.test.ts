import { afterEach, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { setAccount } from '../../../../src/broker/tools/accounts.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { enrolledCluster, samples, WORKER } from '../../../support/enrolled-cluster.js';
import { validSpec } from '../../../support/spec.js';

/**
 * A budget per card model in the real Scheduler (src/broker/loops/model-quota-facts.ts, ADR 0048): the
 * live leases' time on cards of the model counts, so a running task that spent the model's budget keeps
 * the account's next task off that model; a budget of a model no card here has changes nothing.
 */
let f: BrokerFixture | undefined;
afterEach(() => f?.close());
let n = 0;
const key = () => `model-budget-${++n}`;

async function approve(fx: BrokerFixture): Promise<void> {
  const alice = fx.deps.store.principals.findByName('alice')!;
  const rita = fx.deps.store.principals.findByName('rita')!;
  const r = (await fx.invoke(alice, 'create_proposal', {
    spec: validSpec({ cards: { count: 1 }, outputs: [] }),
    idempotency_key: key(),
  })) as { proposal_id: string; revision_id: string };
  const ids = { proposal_id: r.proposal_id, revision_id: r.revision_id };
  await fx.invoke(alice, 'confirm_revision', { ...ids, idempotency_key: key() });
  await fx.invoke(rita, 'submit_review', {
    ...ids,
    decision: 'APPROVE',
    comments: 'ok',
    idempotency_key: key(),
  });
}

describe('a budget per card model', () => {
  it('counts the live leases on the model: the next task waits naming the model and when it resets', async () => {
    const c = await enrolledCluster([1]);
    f = c.f;
    const scheduler = new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
    // The simulated cards are "Simulated GPU"; a budget for H100 covers none of them.
    setAccount(f.deps, 'op', { name: 'default', model: 'H100', budget_card_hours: 1, budget_period: 'week' });
    setAccount(f.deps, 'op', {
      name: 'default',
      model: 'simulated',
      budget_card_hours: 1,
      budget_period: 'week',
    });
    expect(scheduler.runPass().grants).toHaveLength(1);
    c.clock.advance(2 * 3_600_000);
    f.deps.cluster.fleet.connected(WORKER, 'boot-0', samples, c.clock.now());
    f.deps.cluster.fleet.sampled(WORKER, samples, null, c.clock.now());
    const facts = scheduler.snapshot(c.clock.now()).fair_share!.accounts['default']!;
    expect(facts.running_by_model).toEqual({ [samples[0]!.model]: 1 });
    const budget = facts.model_quotas?.find((q) => q.model === 'simulated')?.budget;
    expect(budget?.used_card_seconds).toBeCloseTo(7200, 0);
    expect(facts.model_quotas?.find((q) => q.model === 'H100')?.budget?.used_card_seconds).toBe(0);
    await approve(f);
    const d = scheduler.runPass();
    expect(d.grants).toHaveLength(0);
    expect(d.waiting[0]?.reason).toMatchObject({ code: 'account_budget_exhausted', model: 'simulated' });
    expect(d.waiting[0]?.reason.message).toMatch(/used 2 of its 1 simulated card-hours this period/);
    // Cleared, the task starts.
    setAccount(f.deps, 'op', { name: 'default', model: 'simulated', budget_card_hours: null });
    expect(scheduler.runPass().grants).toHaveLength(1);
  });
});
