import type { DecisionKind } from '../domain/review/diff-base.js';

/**
 * Typed events for the metrics, beside the notifier (src/broker/notifier.ts): a notification says only
 * "topic X changed" and listeners re-read the store, while an event here carries what happened, because
 * a measurement (how long a decision took) is not in the store to re-read. Use cases emit; the metrics
 * edge (src/http/metrics.ts) subscribes. One channel per master (`deps.events`), so two masters in one
 * process never hear each other's events. Emit after the transaction commits (`store.afterCommit`): a
 * rolled-back decision was never made.
 */

/** A decision on a confirmed revision (time from confirm to decision by kind, share auto-approved). */
export interface ReviewDecisionEvent {
  kind: DecisionKind;
  decision: 'APPROVE' | 'REQUEST_CHANGES' | 'REJECT';
  /** From the revision's confirmation to this decision, in seconds (never negative). */
  seconds: number;
}

/** Every event of the channel, by name. */
export interface BrokerEventMap {
  /** A revision was decided (src/broker/review-decisions.ts `recordReviewDecision`). */
  review_decision: ReviewDecisionEvent;
}

/** A listener of events named `K`. */
export type BrokerEventListener<K extends keyof BrokerEventMap> = (event: BrokerEventMap[K]) => void;

/** The master's typed event channel. */
export class BrokerEvents {
  private readonly listeners = new Map<keyof BrokerEventMap, Set<(event: never) => void>>();

  /** Subscribes to the events named `name`; returns the unsubscribe function. */
  on<K extends keyof BrokerEventMap>(name: K, listener: BrokerEventListener<K>): () => void {
    let set = this.listeners.get(name);
    if (!set) {
      set = new Set();
      this.listeners.set(name, set);
    }
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Hands `event` to every listener of `name`, in subscription order. */
  emit<K extends keyof BrokerEventMap>(name: K, event: BrokerEventMap[K]): void {
    for (const l of this.listeners.get(name) ?? []) (l as BrokerEventListener<K>)(event);
  }
}
