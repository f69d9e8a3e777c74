import type { DecisionKind } from '../domain/review/diff-base.js';
import type { BrokerDeps } from './deps.js';
import type { ReviewDecisionEvent } from './events.js';

/**
 * Decisions on confirmed revisions, for the metrics (time from confirm to decision by kind,
 * share auto-approved). A use case calls {@link recordReviewDecision} inside its transaction; the
 * `review_decision` event (src/broker/events.ts) goes out on the master's channel (`deps.events`) only
 * once that transaction commits, and src/http/metrics.ts subscribes to it.
 */

/** Who decided: a person's review, an agent reviewer's review, or a standing grant's auto-approval. */
export type { DecisionKind };

/**
 * Records one decision on a revision confirmed at `confirmedAt` (ms), decided now. Grants call this
 * with kind `grant` for each auto-approval; submit_review calls it with `person` or `agent_reviewer`.
 */
export function recordReviewDecision(
  deps: Pick<BrokerDeps, 'store' | 'events' | 'clock'>,
  kind: DecisionKind,
  decision: ReviewDecisionEvent['decision'],
  confirmedAt: number | null,
): void {
  const seconds = Math.max(0, deps.clock.now() - (confirmedAt ?? deps.clock.now())) / 1000;
  deps.store.afterCommit(() => deps.events.emit('review_decision', { kind, decision, seconds }));
}
