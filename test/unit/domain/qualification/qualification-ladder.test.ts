import { describe, expect, it } from 'vitest';
import {
  type LadderInput,
  planLadder,
  rungLabel,
  usableNodes,
} from '../../../../src/domain/qualification/ladder.js';

/** The ladder of a qualification run: a local worker's, and a Slurm pool's with its two-node rung. */

const base = (over: Partial<LadderInput>): LadderInput => ({
  worker_id: 'w',
  requested: [1, 2, 4, 8],
  explicit: true,
  usable: 8,
  total: 8,
  cordoned: 0,
  quarantined: 0,
  max_cards: 8,
  network_allowed: true,
  pool: null,
  ...over,
});
const nodes = (...gpus: number[]) => gpus.map((g, i) => ({ name: `n${i + 1}`, gpus: g }));

describe('planLadder', () => {
  it('a local worker: counts up to its usable cards and policy, no span rung', () => {
    expect(planLadder(base({}))).toEqual({
      requested: [1, 2, 4, 8],
      ladder: [1, 2, 4, 8],
      span: null,
      skipped: [],
    });
    const p = planLadder(base({ usable: 4, total: 5, cordoned: 1 }));
    expect(p.ladder).toEqual([1, 2, 4]);
    expect(p.skipped).toEqual([
      { cards: 8, reason: 'worker w has 4 usable card(s) (5 in all, 1 cordoned, 0 quarantined)' },
    ]);
    expect(planLadder(base({ max_cards: 2 })).skipped.map((s) => s.cards)).toEqual([4, 8]);
  });

  it('no span rung when policy keeps tasks off the network: its ranks could not meet', () => {
    const p = planLadder(base({ pool: nodes(4, 4), network_allowed: false }));
    expect(p.span).toBeNull();
    expect(p.ladder).toEqual([1, 2, 4]);
    expect(p.skipped).toContainEqual({
      cards: 2,
      reason: expect.stringContaining('policy.allow_network is false'),
    });
  });

  it('a single-node pool of 8: the full in-node ladder, no span rung', () => {
    expect(planLadder(base({ pool: nodes(8) }))).toEqual({
      requested: [1, 2, 4, 8],
      ladder: [1, 2, 4, 8],
      span: null,
      skipped: [],
    });
  });

  it('the default ladder on a pool stops at the largest node; a local worker’s does not', () => {
    expect(planLadder(base({ explicit: false, pool: nodes(4, 4) }))).toEqual({
      requested: [1, 2, 4],
      ladder: [1, 2, 4],
      span: { cards: 8, per_node: 4 },
      skipped: [],
    });
    expect(planLadder(base({ explicit: false, usable: 4, total: 4 })).requested).toEqual([1, 2, 4, 8]);
  });

  it('two nodes of 4, 8 asked for explicitly: in-node rungs capped by the largest node, 8 skipped, plus 8 = 2 × 4', () => {
    const p = planLadder(base({ pool: nodes(4, 4) }));
    expect(p.ladder).toEqual([1, 2, 4]);
    expect(p.span).toEqual({ cards: 8, per_node: 4 });
    expect(p.skipped).toEqual([
      { cards: 8, reason: 'no usable node of the pool has 8 GPUs (the largest has 4)' },
    ]);
  });

  it('k is bounded by the second-largest node, policy and the usable count', () => {
    expect(planLadder(base({ pool: nodes(8, 2), usable: 10, total: 10 })).span).toEqual({
      cards: 4,
      per_node: 2,
    });
    expect(planLadder(base({ pool: nodes(8, 8), usable: 16, total: 16, max_cards: 16 })).span).toEqual({
      cards: 16,
      per_node: 8,
    });
    expect(planLadder(base({ pool: nodes(8, 8), usable: 16, max_cards: 8 })).span).toEqual({
      cards: 8,
      per_node: 4,
    });
    expect(planLadder(base({ pool: nodes(4, 4, 4), usable: 3 })).span).toEqual({ cards: 2, per_node: 1 });
  });

  it('two nodes but no span fits: skipped with a reason (the verdict can then be at best INCONCLUSIVE)', () => {
    const p = planLadder(base({ pool: nodes(4, 4), max_cards: 1 }));
    expect(p.span).toBeNull();
    expect(p.skipped.at(-1)).toEqual({
      cards: 2,
      reason: expect.stringMatching(/^no two-node rung fits/),
    });
  });

  it('a span rung may share an in-node rung’s count; labels keep them apart', () => {
    const p = planLadder(base({ requested: [1, 2], pool: nodes(4, 4) }));
    expect(p).toMatchObject({ ladder: [1, 2], span: { cards: 4, per_node: 2 } });
    expect(planLadder(base({ requested: [1, 2, 4], pool: nodes(4, 2) })).span).toEqual({
      cards: 4,
      per_node: 2,
    });
    expect(rungLabel(4, null)).toBe('4');
    expect(rungLabel(4, 2)).toBe('4=2x2');
  });
});

describe('usableNodes', () => {
  const cards = (n: number, failed: number[] = []) =>
    Array.from({ length: n }, (_, index) => ({ index, health: failed.includes(index) ? 'failed' : 'ok' }));

  it('keeps nodes whose slots are all sampled and healthy; slots run over the nodes in name order', () => {
    const pool = nodes(4, 2, 4);
    expect(usableNodes(pool, cards(10)).map((n) => n.name)).toEqual(['n1', 'n2', 'n3']);
    expect(usableNodes(pool, cards(10, [5])).map((n) => n.name)).toEqual(['n1', 'n3']);
    expect(usableNodes(pool, cards(10, [9])).map((n) => n.name)).toEqual(['n1', 'n2']);
    // A node whose slots the sample does not cover (it grew since) is not planned on either.
    expect(usableNodes(pool, cards(8)).map((n) => n.name)).toEqual(['n1', 'n2']);
  });

  it('a down node takes the two-node rung away from a two-node pool', () => {
    const pool = usableNodes(nodes(4, 4), cards(8, [4, 5, 6, 7]));
    expect(planLadder(base({ explicit: false, pool }))).toMatchObject({ ladder: [1, 2, 4], span: null });
  });

  it('without a sample every node is kept', () => {
    expect(usableNodes(nodes(4, 4), [])).toHaveLength(2);
  });
});
