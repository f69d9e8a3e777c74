import { describe, expect, it } from 'vitest';
import { modelMatches } from '../../../../src/domain/scheduling/requirement.js';
import type { SlurmNode } from '../../../../worker/slurm/cli/types.js';
import { leaseGresType } from '../../../../worker/slurm/job-setup.js';
import { poolSample } from '../../../../worker/slurm/sampler.js';

/**
 * Hostile review of 59cdfc3 (typed Slurm cards): a pool card's model now names its GRES type, so a
 * spec's `cards.model` (and a model quota, ADR 0048) places tasks on Slurm GPUs by type. On a pool
 * without slices a lease whose cards are of two types is still submitted untyped (`--gres=gpu:N`), and
 * Slurm may then give the job GPUs of a third type on that node: a task reviewed and placed for
 * `cards.model: A100` on one 80 GB and one 40 GB A100 can run on H100s, and the master's per-model view
 * (which card of which type its lease holds, what a model quota counts) no longer says what the job
 * holds. A pool with slices refuses such a lease ('several GRES types'); this one does not.
 *
 * `it.fails`: this passes while the defect is there; once a mixed lease is asked for per type
 * (`--gres=gpu:a:1,gpu:b:1`) or refused, flip it to `it`.
 */

function node(name: string, gresTypes: Array<{ type: string | null; count: number }>): SlurmNode {
  return {
    name,
    state: 'MIXED',
    stateFlags: [],
    unavailable: false,
    cpus: 16,
    gpus: gresTypes.reduce((n, t) => n + t.count, 0),
    gresTypes,
    gpusUsed: 0,
    usedGpuIndices: [],
    holders: [],
    reason: null,
    partitions: ['gpu'],
  };
}

describe('a lease across GRES types on a Slurm pool without slices', () => {
  it.fails('is not left to Slurm to fill with any GPU of the node', () => {
    const sample = poolSample(
      [
        node('g1', [
          { type: 'nvidia_a100_80gb_pcie', count: 1 },
          { type: 'nvidia_a100_40gb_pcie', count: 1 },
          { type: 'nvidia_h100_80gb_hbm3', count: 2 },
        ]),
      ],
      () => false,
      false,
      null,
    );
    // Both A100s match a spec's `cards.model: A100`, the H100s do not: the broker may lease cards 0 and 1.
    expect(sample.cards.map((c) => modelMatches(c.model, 'A100'))).toEqual([true, true, false, false]);
    const lease = { cards: [0, 1].map((i) => ({ index: i, uuid: `slurm:g1:gpu${i}` })) };
    // Untyped `--gres=gpu:2` lets Slurm pick the H100s: the job would get other GPUs than reviewed.
    expect(leaseGresType(lease, sample.gres)).not.toBeUndefined();
  });
});
