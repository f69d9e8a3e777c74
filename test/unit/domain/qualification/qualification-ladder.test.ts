import { describe, expect, it } from 'vitest';
import { migCardIndex } from '../../../../src/contracts/sample.js';
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
      slices: [],
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
      slices: [],
      span: null,
      skipped: [],
    });
  });

  it('the default ladder on a pool stops at the largest node; a local worker’s does not', () => {
    expect(planLadder(base({ explicit: false, pool: nodes(4, 4) }))).toEqual({
      requested: [1, 2, 4],
      ladder: [1, 2, 4],
      slices: [],
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
    expect(rungLabel(1, null, '1g.10gb')).toBe('1-mig-1g.10gb');
  });
});

describe('planLadder on a worker with MIG slices (ADR 0046)', () => {
  // sim:2:mig=3g.40gb+2g.20gb+1g.10gb: cards 0 and 1 split, each 3g (gi 1), 2g (gi 2), 1g (gi 3).
  const slice = (card: number, gi: number, profile: string, size: number, healthy = true) => ({
    index: migCardIndex(card, gi, 0),
    profile,
    compute_slices: size,
    healthy,
  });
  const split = (card: number) => [
    slice(card, 1, '3g.40gb', 3),
    slice(card, 2, '2g.20gb', 2),
    slice(card, 3, '1g.10gb', 1),
  ];

  it('mixed: whole cards keep their ladder; the single-card rung also runs once per profile, smallest first; a count only the MIG cards could fill is skipped, saying why', () => {
    const p = planLadder(
      base({ usable: 2, total: 4, mig_mode_cards: [2, 3], slices: [...split(3), ...split(2)] }),
    );
    expect(p.ladder).toEqual([1, 2]);
    expect(p.slices).toEqual([
      { index: migCardIndex(2, 3, 0), profile: '1g.10gb' },
      { index: migCardIndex(2, 2, 0), profile: '2g.20gb' },
      { index: migCardIndex(2, 1, 0), profile: '3g.40gb' },
    ]);
    expect(p.skipped.map((s) => s.cards)).toEqual([4, 8]);
    expect(p.skipped[0]?.reason).toBe(
      'all_reduce is not offered across MIG instances: worker w has 2 usable whole card(s) (4 in all, 0 cordoned, 0 quarantined, 2 in MIG mode); the slices of card(s) 2, 3 get only the single-card GEMM rung (to test 4 cards, take cards out of MIG mode: nvidia-smi -i 2,3 -mig 0 while the worker is drained)',
    );
  });

  it('slices only: the single-card rung runs on the slices alone; every larger count is skipped with the MIG reason', () => {
    const p = planLadder(
      base({ usable: 0, total: 2, mig_mode_cards: [0, 1], slices: [...split(0), ...split(1)] }),
    );
    expect(p.ladder).toEqual([]);
    expect(p.slices.map((s) => s.profile)).toEqual(['1g.10gb', '2g.20gb', '3g.40gb']);
    expect(p.skipped.map((s) => s.cards)).toEqual([2, 4, 8]);
    expect(
      p.skipped.every((s) => s.reason.startsWith('all_reduce is not offered across MIG instances')),
    ).toBe(true);
    // Asked for 1 alone, nothing is skipped: the verdict can be PASSED on the slices.
    expect(
      planLadder(base({ requested: [1], usable: 0, total: 1, mig_mode_cards: [0], slices: split(0) })),
    ).toEqual({
      requested: [1],
      ladder: [],
      slices: split(0)
        .reverse()
        .map((s) => ({ index: s.index, profile: s.profile })),
      span: null,
      skipped: [],
    });
  });

  it('a profile runs on its lowest healthy slice; no slice rung unless count 1 is asked for', () => {
    const p = planLadder(
      base({
        usable: 0,
        total: 1,
        mig_mode_cards: [0],
        slices: [slice(0, 3, '1g.10gb', 1, false), slice(0, 4, '1g.10gb', 1), slice(0, 5, '1g.10gb', 1)],
      }),
    );
    expect(p.slices).toEqual([{ index: migCardIndex(0, 4, 0), profile: '1g.10gb' }]);
    expect(
      planLadder(base({ requested: [2], usable: 0, total: 1, mig_mode_cards: [0], slices: split(0) })).slices,
    ).toEqual([]);
  });

  it('policy.mig forbid: no slice rung, and the cards in MIG mode are reported untested (INCONCLUSIVE at best)', () => {
    const p = planLadder(
      base({
        usable: 1,
        total: 2,
        mig_mode_cards: [1],
        slices: split(1),
        mig_refused:
          'policy.mig is "forbid", so no task may lease their slices (set it to "allow", or cordon those cards)',
      }),
    );
    expect(p.slices).toEqual([]);
    expect(p.ladder).toEqual([1]);
    expect(p.skipped[0]).toEqual({
      cards: 1,
      reason:
        'card(s) 1 in MIG mode cannot be tested: policy.mig is "forbid", so no task may lease their slices (set it to "allow", or cordon those cards)',
    });
    // Slices only under forbid: nothing runs at one card either, and the reason says why.
    const only = planLadder(
      base({
        requested: [1],
        usable: 0,
        total: 1,
        mig_mode_cards: [0],
        slices: split(0),
        mig_refused:
          'policy.mig is "forbid", so no task may lease their slices (set it to "allow", or cordon those cards)',
      }),
    );
    expect(only.ladder).toEqual([]);
    expect(only.skipped.map((s) => s.cards)).toEqual([1]);
  });

  it('a card in MIG mode without a usable slice is never tested whole, and says so', () => {
    const p = planLadder(base({ requested: [1], usable: 0, total: 1, mig_mode_cards: [0], slices: [] }));
    expect(p).toMatchObject({ ladder: [], slices: [] });
    expect(p.skipped).toEqual([
      {
        cards: 1,
        reason:
          'card(s) 0 in MIG mode have no usable slice to test (create instances with nvidia-smi mig, or cordon those cards)',
      },
    ]);
  });

  it('policy max_cards 0 plans nothing on slices either', () => {
    const p = planLadder(
      base({ requested: [1], max_cards: 0, usable: 0, total: 1, mig_mode_cards: [0], slices: split(0) }),
    );
    expect(p.slices).toEqual([]);
    expect(p.skipped).toEqual([{ cards: 1, reason: 'policy allows at most 0 cards per task' }]);
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
