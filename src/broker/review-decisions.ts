import type { DecisionKind } from '../domain/review/diff-base.js';
import type { BrokerDeps } from './deps.js';
import type { Notifier } from './notifier.js';

/**
 * Decisions on confirmed revisions, for the metrics (issue 23: time from confirm to decision by kind,
 * share auto-approved). A use case calls {@link recordReviewDecision} inside its transaction; listeners
 * (src/http/metrics.ts) hear it only once that transaction commits. Keyed by the master's notifier so
 * several masters in one process never share listeners.
 */

/** Who decided: a person's review, an agent reviewer's review, or a standing grant's auto-approval. */
export type { DecisionKind };

/** One decision as the metrics see it. */
export interface ReviewDecisionEvent {
  kind: DecisionKind;
  decision: 'APPROVE' | 'REQUEST_CHANGES' | 'REJECT';
  /** From the revision's confirmation to this decision, in seconds (never negative). */
  seconds: number;
}

type Listener = (e: ReviewDecisionEvent) => void;
const listeners = new WeakMap<Notifier, Set<Listener>>();

/** Subscribes to the decisions of the master owning `notifier`; returns the unsubscribe function. */
export function onReviewDecision(notifier: Notifier, listener: Listener): () => void {
  let set = listeners.get(notifier);
  if (!set) {
    set = new Set();
    listeners.set(notifier, set);
  }
  set.add(listener);
  return () => set.delete(listener);
}

/**
 * Records one decision on a revision confirmed at `confirmedAt` (ms), decided now. Grants call this
 * with kind `grant` for each auto-approval; submit_review calls it with `person` or `agent_reviewer`.
 */
export function recordReviewDecision(
  deps: Pick<BrokerDeps, 'store' | 'notifier' | 'clock'>,
  kind: DecisionKind,
  decision: ReviewDecisionEvent['decision'],
  confirmedAt: number | null,
): void {
  const seconds = Math.max(0, deps.clock.now() - (confirmedAt ?? deps.clock.now())) / 1000;
  deps.store.afterCommit(() => {
    for (const l of listeners.get(deps.notifier) ?? []) l({ kind, decision, seconds });
  });
}
