import { GRANT_ALERT_RATIO, grantUsage } from '../../domain/grants/grant.js';
import type { BrokerDeps } from '../deps.js';
import { cancelQueuedRunsOf } from '../grant-fence.js';
import { appendAlert, moveGrant } from '../machines/standing-grant.js';
import { cancelUnstartedRunsOf } from '../workers/cancel-request.js';

/**
 * The sweep's standing-grant step (src/broker/loops/sweep.ts step 3): grants past `expires_at` become
 * EXPIRED (coverage refuses them from that instant anyway: the clock is one of its clauses), and a
 * live grant whose lifetime passed 80 % raises its TTL alert once; an expired grant's QUEUED tasks are
 * cancelled (src/broker/grant-fence.ts). Returns how many expired.
 */
export function sweepGrants(deps: BrokerDeps, batch = 100): number {
  const now = deps.clock.now();
  return deps.store.transaction(() => {
    let expired = 0;
    for (const g of deps.store.grants.expired(now, batch)) {
      const next = moveGrant(
        deps,
        g,
        'expire',
        'sweeper',
        {},
        { expires_at: new Date(g.expires_at).toISOString() },
      );
      // Its runs that have not started never will (the scheduler's fence refuses them anyway).
      cancelQueuedRunsOf(deps, next, 'sweeper');
      cancelUnstartedRunsOf(deps, g.id, 'sweeper');
      expired++;
    }
    for (const g of deps.store.grants.live()) {
      if (g.alerted.includes('ttl')) continue;
      const usage = grantUsage(g, now);
      if (usage.ttl < GRANT_ALERT_RATIO) continue;
      const next = { ...g, alerted: [...g.alerted, 'ttl'], updated_at: now };
      if (deps.store.grants.update(next, g)) appendAlert(deps, next, 'ttl', usage, now);
    }
    return expired;
  });
}
