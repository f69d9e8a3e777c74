import { afterEach, describe, expect, it } from 'vitest';
import type { ReviewDecisionEvent } from '../../../src/broker/events.js';
import { recordReviewDecision } from '../../../src/broker/review-decisions.js';
import { diffShareOf } from '../../../src/broker/tools/revision-diff.js';
import { costSharesOf } from '../../../src/broker/tools/tool-cost.js';
import { setVerifiedContentCacheBytes, verifiedContentHeldBytes } from '../../../src/broker/verified-blob.js';
import type { ManualClock } from '../../../src/platform/clock.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';

/**
 * Per-master state is explicit (docs/architecture.md): each master's caches and shares are its own
 * `deps.runtime`, and its review-decision metrics go out on its own `deps.events`, after the commit.
 */

let fixtures: BrokerFixture[] = [];
afterEach(() => {
  for (const f of fixtures) f.close();
  fixtures = [];
});
const master = () => {
  const f = makeBrokerDeps();
  fixtures.push(f);
  return f;
};

describe('the broker runtime', () => {
  it('gives two masters in one process state of their own', () => {
    const a = master();
    const b = master();
    expect(a.deps.runtime).not.toBe(b.deps.runtime);
    expect(diffShareOf(a.deps)).not.toBe(diffShareOf(b.deps));
    expect(costSharesOf(a.deps)).not.toBe(costSharesOf(b.deps));
    setVerifiedContentCacheBytes(a.deps, 0);
    expect(a.deps.runtime.verified.budgetBytes).toBe(0);
    expect(b.deps.runtime.verified.budgetBytes).toBeGreaterThan(0);
    expect(verifiedContentHeldBytes(b.deps)).toBe(0);
    const release = costSharesOf(a.deps).waits.take('p', 'wait_for_task');
    expect(costSharesOf(a.deps).waits.heldBy('p')).toBe(1);
    expect(costSharesOf(b.deps).waits.heldBy('p')).toBe(0);
    release();
  });

  it("sends a review decision to its own master's listeners only, once the transaction commits", () => {
    const a = master();
    const b = master();
    const heardA: ReviewDecisionEvent[] = [];
    const heardB: ReviewDecisionEvent[] = [];
    const stop = a.deps.events.on('review_decision', (e) => heardA.push(e));
    b.deps.events.on('review_decision', (e) => heardB.push(e));
    const confirmedAt = a.clock.now();
    (a.clock as ManualClock).advance(1500);
    a.deps.store.transaction(() => {
      recordReviewDecision(a.deps, 'person', 'APPROVE', confirmedAt);
      expect(heardA).toEqual([]); // not before the commit
    });
    expect(heardA).toEqual([{ kind: 'person', decision: 'APPROVE', seconds: 1.5 }]);
    expect(() =>
      a.deps.store.transaction(() => {
        recordReviewDecision(a.deps, 'grant', 'APPROVE', null);
        throw new Error('rolled back');
      }),
    ).toThrow('rolled back');
    expect(heardA).toHaveLength(1); // a rolled-back decision was never made
    stop();
    recordReviewDecision(a.deps, 'agent_reviewer', 'REJECT', null);
    expect(heardA).toHaveLength(1);
    expect(heardB).toEqual([]);
  });
});
