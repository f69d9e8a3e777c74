import { afterEach, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { createAccount } from '../../../../src/broker/tools/accounts.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { enrolledCluster } from '../../../support/enrolled-cluster.js';

/**
 * Attack on get_usage's scope (src/broker/tools/accounts.ts getUsage): docs/mcp-tools.md says
 * "submitters, reviewers and agent reviewers see their own account's charges, operators and viewers every
 * account's", but getUsage widens to every account with canReadAll(), which is true for reviewers and
 * agent reviewers. An agent reviewer of team default reads team-b's card-seconds, per principal name and
 * per model (what another tenant runs, who runs it, and when, with `interval`).
 */
let f: BrokerFixture | undefined;
afterEach(() => f?.close());

describe('attack: a reviewer or agent reviewer reads every account’s usage', () => {
  for (const role of ['reviewer', 'agent_reviewer'] as const)
    it(`a ${role} sees only its own account's charges`, async () => {
      const c = await enrolledCluster([1]);
      f = c.f;
      new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link).runPass();
      const lease = f.deps.store.leases.liveLeases()[0]!;
      const now = f.clock.now();
      createAccount(f.deps, 'op', { name: 'team-b' });
      f.deps.store.usage.charge([
        {
          lease_id: lease.id,
          model: 'H100-SECRET-PROJECT',
          simulated: false,
          task_id: lease.task_id,
          principal_id: 'bob-id',
          account: 'team-b',
          grant_id: null,
          cards: 8,
          started_at: now - 3_600_000,
          ended_at: now - 1,
          card_seconds: 8 * 3540,
        },
      ]);
      const snoop = f.principal(`snoop-${role}`, [role]);
      const u = (await f.invoke(snoop, 'get_usage', { by: 'model' })) as {
        account: string | null;
        lines: Array<{ key: string }>;
      };
      expect(u.account).toBe('default');
      expect(u.lines.map((l) => l.key)).not.toContain('H100-SECRET-PROJECT');
    });
});
