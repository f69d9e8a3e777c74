import { describe, expect, it } from 'vitest';
import { modelMatches } from '../../../../src/domain/scheduling/requirement.js';
import { SlurmRequestError } from '../../../../worker/slurm/cli/errors.js';
import { buildSbatchArgs } from '../../../../worker/slurm/cli/sbatch-args.js';
import type { SlurmNode } from '../../../../worker/slurm/cli/types.js';
import { leaseGresType } from '../../../../worker/slurm/job-setup.js';
import { poolSample } from '../../../../worker/slurm/sampler.js';
import { SUBMIT_BASE } from '../../../support/slurm-job.js';
import { slurmNode } from '../../../support/slurm-node.js';

/**
 * Hostile review of 59cdfc3 (typed Slurm cards): a pool card's model now names its GRES type, so a
 * spec's `cards.model` (and a model quota, ADR 0048) places tasks on Slurm GPUs by type. On a pool
 * without slices a lease whose cards are of two types is still submitted untyped (`--gres=gpu:N`), and
 * Slurm may then give the job GPUs of a third type on that node: a task reviewed and placed for
 * `cards.model: A100` on one 80 GB and one 40 GB A100 can run on H100s, and the master's per-model view
 * (which card of which type its lease holds, what a model quota counts) no longer says what the job
 * holds. A pool with slices refuses such a lease ('several GRES types'); this one does not.
 *
 * Fixed: a one-node lease of several types is asked for per type (`--gres=gpu:a:1,gpu:b:1`); across
 * nodes (one `--gres` for every node) it stays untyped.
 */

function node(name: string, gresTypes: Array<{ type: string | null; count: number }>): SlurmNode {
  return slurmNode(name, { gpus: gresTypes.reduce((n, t) => n + t.count, 0), gresTypes });
}

describe('a lease across GRES types on a Slurm pool without slices', () => {
  it('is not left to Slurm to fill with any GPU of the node: each type is asked for', () => {
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
    // Untyped `--gres=gpu:2` would let Slurm pick the H100s: each type is asked for instead.
    const gres = leaseGresType(lease, sample.gres);
    expect(gres).toEqual({
      types: [
        { type: 'nvidia_a100_80gb_pcie', count: 1 },
        { type: 'nvidia_a100_40gb_pcie', count: 1 },
      ],
      problem: null,
    });
    const args = buildSbatchArgs({ ...SUBMIT_BASE, gpusPerNode: 2, gpuTypes: gres!.types! }).args;
    expect(args).toContain('--gres=gpu:nvidia_a100_80gb_pcie:1,gpu:nvidia_a100_40gb_pcie:1');
    // An H100 and an A100: the same, one of each.
    const mixed = { cards: [0, 2].map((i) => ({ index: i, uuid: `slurm:g1:gpu${i}` })) };
    expect(leaseGresType(mixed, sample.gres)?.types?.map((t) => t.type)).toEqual([
      'nvidia_a100_80gb_pcie',
      'nvidia_h100_80gb_hbm3',
    ]);
  });

  it('across nodes stays untyped (one --gres applies to every node of the job); one type across nodes is typed', () => {
    const sample = poolSample(
      [node('g1', [{ type: 'a100', count: 2 }]), node('g2', [{ type: 'h100', count: 2 }])],
      () => false,
      false,
      null,
    );
    const lease = (...i: number[]) => ({ cards: i.map((x) => ({ index: x, uuid: `u${x}` })) });
    expect(leaseGresType(lease(1, 2), sample.gres)).toBeUndefined();
    expect(leaseGresType(lease(0, 1), sample.gres)).toEqual({ type: 'a100', problem: null });
    const same = poolSample(
      [node('g1', [{ type: 'a100', count: 2 }]), node('g2', [{ type: 'a100', count: 2 }])],
      () => false,
      false,
      null,
    );
    expect(leaseGresType(lease(0, 1, 2, 3), same.gres)).toEqual({ type: 'a100', problem: null });
  });

  it('sbatch refuses a types list that does not add up, repeats a type, names a bad one, or comes with gpuType', () => {
    const bad = [
      { gpusPerNode: 2, gpuTypes: [{ type: 'a', count: 1 }] },
      {
        gpusPerNode: 2,
        gpuTypes: [
          { type: 'a', count: 1 },
          { type: 'a', count: 1 },
        ],
      },
      {
        gpusPerNode: 2,
        gpuTypes: [
          { type: 'a', count: 1 },
          { type: 'b:1,gpu', count: 1 },
        ],
      },
      {
        gpusPerNode: 2,
        gpuTypes: [
          { type: 'a', count: 2 },
          { type: 'b', count: 0 },
        ],
      },
      { gpusPerNode: 2, gpuType: 'a', gpuTypes: [{ type: 'a', count: 2 }] },
    ];
    for (const b of bad) expect(() => buildSbatchArgs({ ...SUBMIT_BASE, ...b })).toThrow(SlurmRequestError);
  });
});
