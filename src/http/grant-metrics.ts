import { Gauge, type Registry } from 'prom-client';
import type { BrokerDeps } from '../broker/deps.js';
import { grantUsage } from '../domain/grants/grant.js';

/**
 * `gpu_broker_grant_budget_used_ratio{grant, budget}` (ADR 0029), beside src/http/metrics.ts: read at
 * scrape time for ACTIVE and SUSPENDED standing grants, budget `runs`, `card_hours` (charged + reserved)
 * or `ttl`; the master alerts at 0.8. Decisions by kind (`grant` included) are metrics.ts's
 * `gpu_broker_review_decision_seconds`, fed by the `review_decision` events of src/broker/events.ts.
 */
export function registerGrantGauge(deps: BrokerDeps, registers: Registry[]): void {
  new Gauge({
    name: 'gpu_broker_grant_budget_used_ratio',
    help: 'Share of a live standing grant’s budget used, by grant and budget (runs, card_hours, ttl); alerts at 0.8.',
    labelNames: ['grant', 'budget'],
    registers,
    collect() {
      this.reset();
      const now = deps.clock.now();
      for (const g of deps.store.grants.live())
        for (const [budget, ratio] of Object.entries(grantUsage(g, now)))
          this.set({ grant: g.id, budget }, ratio);
    },
  });
}
