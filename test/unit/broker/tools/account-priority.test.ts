import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { createPrincipal } from '../../../../src/broker/principals.js';
import { createAccount, setAccount } from '../../../../src/broker/tools/accounts.js';
import type { BrokerError } from '../../../../src/contracts/errors.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { validSpec } from '../../../support/spec.js';

/**
 * An account's maximum priority (docs/operations.md "Accounts and usage"): a revision asking for more is
 * an error finding the reviewer sees and cannot be confirmed; a task approved before the maximum was
 * lowered queues at the maximum.
 */

let f: BrokerFixture;
let alice: Principal;
let rita: Principal;
let n = 0;
const key = () => `k${++n}`;

beforeEach(() => {
  f = makeBrokerDeps();
  createAccount(f.deps, 'test', { name: 'team-a', max_priority: 10 });
  alice = createPrincipal(
    f.deps,
    { name: 'alice', roles: ['submitter'], account: 'team-a' },
    'test',
  ).principal;
  rita = f.principal('rita', ['reviewer']);
});
afterEach(() => f.close());

async function propose(priority: number) {
  return (await f.invoke(alice, 'create_proposal', {
    spec: validSpec({ priority }),
    idempotency_key: key(),
  })) as {
    proposal_id: string;
    revision_id: string;
    findings: Array<{ code: string; severity: string; message: string }>;
  };
}

describe('an account’s maximum priority', () => {
  it('a revision above it has an error finding and is not confirmed; at or below it, nothing', async () => {
    const high = await propose(50);
    const finding = high.findings.find((x) => x.code === 'PRIORITY_ABOVE_ACCOUNT');
    expect(finding).toMatchObject({ severity: 'error' });
    expect(finding?.message).toContain('priority 50 is above the maximum of account');
    const refused = (await f
      .invoke(alice, 'confirm_revision', {
        proposal_id: high.proposal_id,
        revision_id: high.revision_id,
        idempotency_key: key(),
      })
      .catch((e: unknown) => e)) as BrokerError;
    expect(refused.code).toBe('POLICY_VIOLATION');
    expect((await propose(10)).findings.map((x) => x.code)).not.toContain('PRIORITY_ABOVE_ACCOUNT');
  });

  it('a task approved before the maximum was lowered queues at the maximum', async () => {
    const p = await propose(10);
    await f.invoke(alice, 'confirm_revision', { ...ids(p), idempotency_key: key() });
    await f.invoke(rita, 'submit_review', {
      ...ids(p),
      decision: 'APPROVE',
      comments: 'ok',
      idempotency_key: key(),
    });
    setAccount(f.deps, 'test', { name: 'team-a', max_priority: 3 });
    const scheduler = new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
    const snapshot = scheduler.snapshot(f.deps.clock.now());
    expect(snapshot.tasks.map((t) => [t.account, t.priority])).toEqual([['team-a', 3]]);
  });
});

const ids = (p: { proposal_id: string; revision_id: string }) => ({
  proposal_id: p.proposal_id,
  revision_id: p.revision_id,
});
