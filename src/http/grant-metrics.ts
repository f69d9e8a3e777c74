import { Gauge, Histogram, type Registry } from 'prom-client';
import type { BrokerDeps } from '../broker/deps.js';
import { grantUsage } from '../domain/standing-grant.js';

/**
 * Metrics of standing grants (issue 23 §1), beside src/http/metrics.ts:
 *  - `gpu_broker_grant_budget_used_ratio{grant, budget}`: read at scrape time for ACTIVE and SUSPENDED
 *    grants, budget `runs`, `card_hours` (charged + reserved) or `ttl`; alert at 0.8;
 *  - `gpu_broker_review_decision_seconds{kind}`: from confirm to the decision on that revision, by who
 *    decided (`person` or `grant`); the share auto-approved is the ratio of the `_count`s.
 */

const DECISION_BUCKETS = [0.01, 0.05, 0.25, 1, 5, 30, 60, 300, 900, 3600, 14400, 86400];

/** Registers both series; returns the handler of proposal change notifications. */
export function registerGrantSeries(deps: BrokerDeps, registers: Registry[]): (topic: string) => void {
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
  const decision = new Histogram({
    name: 'gpu_broker_review_decision_seconds',
    help: 'From confirm_revision to the decision on that revision, by kind (person, grant).',
    labelNames: ['kind'],
    buckets: DECISION_BUCKETS,
    registers,
  });
  for (const kind of ['person', 'grant']) decision.zero({ kind });
  const seen = new Set<string>();
  return (topic) => {
    if (!topic.startsWith('proposal:')) return;
    const reviews = deps.store.proposals.reviews(topic.slice('proposal:'.length));
    const last = reviews.at(-1) as ((typeof reviews)[number] & { grant_id?: string | null }) | undefined;
    if (!last || seen.has(last.id)) return;
    seen.add(last.id);
    if (seen.size > 10_000) seen.delete(seen.values().next().value!);
    const confirmed = deps.store.proposals.revision(last.revision_id)?.confirmed_at;
    if (confirmed === null || confirmed === undefined) return;
    decision.observe(
      { kind: last.grant_id ? 'grant' : 'person' },
      Math.max(0, last.created_at - confirmed) / 1000,
    );
  };
}
