import { describe, expect, it } from 'vitest';
import { CardSampleSchema, cardLabel } from '../../../../src/contracts/sample.js';
import { modelMatches } from '../../../../src/domain/scheduling/requirement.js';
import { SlurmRequestError } from '../../../../worker/slurm/cli/errors.js';
import { parseGresConf } from '../../../../worker/slurm/cli/gres.js';
import { buildSbatchArgs } from '../../../../worker/slurm/cli/sbatch-args.js';
import type { SlurmNode } from '../../../../worker/slurm/cli/types.js';
import { leaseGresType } from '../../../../worker/slurm/job-setup.js';
import { poolCards, poolSample, slurmCardModel } from '../../../../worker/slurm/sampler.js';
import { SUBMIT_BASE } from '../../../support/slurm-job.js';
import { slurmNode } from '../../../support/slurm-node.js';

/**
 * A Slurm pool with MIG slices as typed GRES (docs/slurm.md "MIG slices"): the slices become slice
 * cards with their profile and capability minors from gres.conf, whole cards keep their numbering, a
 * foreign job's IDX marks the right slice, and a lease of slices is submitted as `--gres=gpu:<type>:N`.
 */

function node(name: string, over: Partial<SlurmNode> = {}): SlurmNode {
  return slurmNode(name, {
    gresTypes: [
      { type: 'h100', count: 1 },
      { type: '3g.40gb', count: 1 },
      { type: '1g.10gb', count: 2 },
    ],
    ...over,
  });
}

const GRES_CONF = parseGresConf(`NodeName=g[1-2] Name=gpu Type=h100 File=/dev/nvidia1
NodeName=g[1-2] Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13
NodeName=g[1-2] Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22
NodeName=g[1-2] Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap30,/dev/nvidia-caps/nvidia-cap31
`);
const nobody = () => false;

describe('a Slurm pool with MIG slices', () => {
  it('reports whole cards 0.. and each slice as a card with profile, instances and minors from gres.conf', () => {
    const cards = poolCards([node('g1'), node('g2')], nobody, false, GRES_CONF);
    for (const c of cards) expect(CardSampleSchema.safeParse(c).success).toBe(true);
    expect(cards.map((c) => [cardLabel(c.index), c.uuid, c.mig?.profile ?? 'whole'])).toEqual([
      ['0', 'slurm:g1:gpu0', 'whole'],
      ['0:mig:1/0', 'slurm:g1:gpu1', '3g.40gb'],
      ['0:mig:2/0', 'slurm:g1:gpu2', '1g.10gb'],
      ['0:mig:3/0', 'slurm:g1:gpu3', '1g.10gb'],
      ['1', 'slurm:g2:gpu0', 'whole'],
      ['1:mig:1/0', 'slurm:g2:gpu1', '3g.40gb'],
      ['1:mig:2/0', 'slurm:g2:gpu2', '1g.10gb'],
      ['1:mig:3/0', 'slurm:g2:gpu3', '1g.10gb'],
    ]);
    const a = cards[2]?.mig;
    expect(a).toMatchObject({
      parent_uuid: 'slurm:g1:nvidia0',
      gpu_instance_profile: '1g.10gb',
      compute_slices: 1,
      gi_access_minor: 21,
      ci_access_minor: 22,
    });
    expect(cards[1]?.mig?.compute_slices).toBe(3);
    expect(cards.every((c) => c.health === 'ok')).toBe(true);
  });

  it('an untyped pool is numbered exactly as before (no gres.conf is needed)', () => {
    const untyped = node('n1');
    delete untyped.gresTypes;
    const cards = poolCards([untyped, { ...untyped, name: 'n2' }], nobody, false, null);
    expect(cards.map((c) => c.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(cards.some((c) => c.mig !== undefined)).toBe(false);
  });

  it('a slice gres.conf gives no files (AutoDetect, no line) is shown, never grantable: unknown health, no minors', () => {
    const cards = poolCards([node('g9')], nobody, false, GRES_CONF);
    const slices = cards.filter((c) => c.mig !== undefined);
    expect(slices).toHaveLength(3);
    for (const s of slices) {
      expect(CardSampleSchema.safeParse(s).success).toBe(true);
      expect(s.health).toBe('unknown');
      expect(s.mig?.gi_access_minor).toBeNull();
      expect(s.health_reasons[0]).toContain('gres.conf names no device files');
    }
    expect(new Set(slices.map((s) => s.index)).size).toBe(3);
  });

  it('a foreign job on IDX 2 marks that slice, not another; the GRES of each card is kept for submit and ranks', () => {
    const { cards, gres } = poolSample(
      [
        node('g1', {
          usedGpuIndices: [2],
          holders: [{ jobId: '7', name: 'theirs', comment: null, indices: [2] }],
        }),
      ],
      nobody,
      false,
      GRES_CONF,
    );
    expect(cards.filter((c) => c.processes.length > 0).map((c) => c.uuid)).toEqual(['slurm:g1:gpu2']);
    expect(gres.hasSlices).toBe(true);
    expect(gres.cards.get(cards[2]?.index ?? -1)).toEqual({
      node: 'g1',
      position: 2,
      type: '1g.10gb',
      profile: '1g.10gb',
    });
    expect(gres.files.get('g1')?.[2]).toEqual([
      '/dev/nvidia0',
      '/dev/nvidia-caps/nvidia-cap21',
      '/dev/nvidia-caps/nvidia-cap22',
    ]);
  });

  it('two gres.conf lines with the same caps are one slice, not two cards with one index', () => {
    const dup =
      parseGresConf(`NodeName=g1 Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22
NodeName=g1 Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22`);
    const cards = poolCards(
      [node('g1', { gpus: 2, gresTypes: [{ type: '1g.10gb', count: 2 }] })],
      nobody,
      false,
      dup,
    );
    expect(cards).toHaveLength(1);
  });
});

describe('submitting a lease on a pool with slices', () => {
  const { cards, gres } = poolSample([node('g1'), node('g2')], nobody, false, GRES_CONF);
  const lease = (...labels: string[]) => ({
    cards: labels.map((l) => {
      const c = cards.find((x) => cardLabel(x.index) === l)!;
      return { index: c.index, uuid: c.uuid };
    }),
  });

  it('asks for slices by their type, whole cards by theirs', () => {
    expect(leaseGresType(lease('0:mig:2/0', '1:mig:3/0'), gres)).toEqual({ type: '1g.10gb', problem: null });
    expect(leaseGresType(lease('0'), gres)).toEqual({ type: 'h100', problem: null });
    const args = buildSbatchArgs({
      scriptPath: '/j/job.sh',
      jobName: 'gb-t1',
      comment: 'gpu-broker:w1:t1',
      stdout: '/j/o',
      stderr: '/j/e',
      chdir: '/j',
      gpusPerNode: 2,
      gpuType: '1g.10gb',
    }).args;
    expect(args).toContain('--gres=gpu:1g.10gb:2');
    expect(args).not.toContain('--gres=gpu:2');
  });

  it('refuses a lease Slurm could not honour as reviewed: two types, slices and whole cards, cards it does not know', () => {
    expect(leaseGresType(lease('0:mig:1/0', '0:mig:2/0'), gres)?.problem).toContain('several GRES types');
    expect(leaseGresType(lease('0', '1'), gres)).toEqual({ type: 'h100', problem: null });
    expect(leaseGresType({ cards: [{ index: 4000, uuid: 'x' }] }, gres)?.problem).toContain(
      'not in this Slurm pool',
    );
    const untypedWhole = poolSample(
      [
        node('g1', {
          gpus: 2,
          gresTypes: [
            { type: null, count: 1 },
            { type: '1g.10gb', count: 1 },
          ],
        }),
      ],
      nobody,
      false,
      GRES_CONF,
    );
    expect(
      leaseGresType({ cards: [{ index: 0, uuid: 'slurm:g1:gpu0' }] }, untypedWhole.gres)?.problem,
    ).toContain('untyped --gres=gpu:N could be given a slice');
  });

  it('on a pool without slices asks for whole cards by their types, untyped GPUs untyped as before; refuses a type that could smuggle options', () => {
    const typed = poolSample([node('g1', { gresTypes: [{ type: 'a100', count: 4 }] })], nobody, false, null);
    const card = (i: number) => ({ index: i, uuid: `slurm:g1:gpu${i}` });
    expect(leaseGresType({ cards: [card(0), card(3)] }, typed.gres)).toEqual({ type: 'a100', problem: null });
    // A node with two types: a lease of one type asks for it; a lease across both asks for one of each.
    const mixed = poolSample(
      [
        node('g1', {
          gresTypes: [
            { type: 'h100', count: 2 },
            { type: 'a100', count: 2 },
          ],
        }),
      ],
      nobody,
      false,
      null,
    );
    expect(mixed.cards.map((c) => c.model)).toEqual([
      'slurm gpu h100',
      'slurm gpu h100',
      'slurm gpu a100',
      'slurm gpu a100',
    ]);
    expect(leaseGresType({ cards: [card(2), card(3)] }, mixed.gres)).toEqual({ type: 'a100', problem: null });
    expect(leaseGresType({ cards: [card(1), card(2)] }, mixed.gres)).toEqual({
      types: [
        { type: 'h100', count: 1 },
        { type: 'a100', count: 1 },
      ],
      problem: null,
    });
    // Untyped GPUs, a card the sample does not know, no sample yet: untyped `gpu:N` as before.
    const untyped = poolSample([node('g1', { gresTypes: [{ type: null, count: 4 }] })], nobody, false, null);
    expect(untyped.cards.every((c) => c.model === 'slurm gpu')).toBe(true);
    expect(leaseGresType({ cards: [card(0)] }, untyped.gres)).toBeUndefined();
    expect(leaseGresType({ cards: [{ index: 9, uuid: 'x' }] }, typed.gres)).toBeUndefined();
    expect(leaseGresType({ cards: [{ index: 0, uuid: 'x' }] }, null)).toBeUndefined();
    // A type sbatch would not be given (not Slurm's characters) is not asked for: untyped as before.
    const odd = poolSample([node('g1', { gresTypes: [{ type: 'a100 x', count: 4 }] })], nobody, false, null);
    expect(leaseGresType({ cards: [card(0)] }, odd.gres)).toBeUndefined();
    for (const bad of ['1g.10gb:2,gpu', '1g 10gb', '', 'x'.repeat(65), '--mem=1']) {
      expect(() => buildSbatchArgs({ ...SUBMIT_BASE, gpusPerNode: 1, gpuType: bad })).toThrow(
        SlurmRequestError,
      );
    }
  });
});

describe('a Slurm pool card’s model', () => {
  it('names the GRES type, so that a spec’s cards.model and a model quota match it by words', () => {
    const cards = poolCards([node('g1')], nobody, false, GRES_CONF);
    // The whole card is typed h100; the slices' types are only their profiles, which name no model.
    expect(cards.map((c) => c.model)).toEqual(['slurm gpu h100', 'slurm gpu', 'slurm gpu', 'slurm gpu']);
    expect(poolCards([node('g1')], nobody, true, GRES_CONF)[0]?.model).toBe('slurm gpu h100 (simulated)');
    // AutoDetect's slice types carry the card's name before the profile: the model keeps it.
    expect(slurmCardModel({ type: 'nvidia_a100_80gb_pcie_1g.10gb', profile: '1g.10gb' }, false)).toBe(
      'slurm gpu nvidia_a100_80gb_pcie',
    );
    expect(slurmCardModel({ type: 'NVIDIA_A100_1G.10GB', profile: '1g.10gb' }, false)).toBe(
      'slurm gpu NVIDIA_A100',
    );
    expect(slurmCardModel({ type: null, profile: null }, true)).toBe('slurm gpu (simulated)');
    const long = slurmCardModel({ type: 'x'.repeat(300), profile: null }, true);
    expect(CardSampleSchema.shape.model.safeParse(long).success).toBe(true);
    // Matched by words, as every card's model is (src/domain/scheduling/requirement.ts).
    expect(modelMatches('slurm gpu h100', 'H100')).toBe(true);
    expect(modelMatches('slurm gpu nvidia_h100_80gb_hbm3', 'H100')).toBe(true);
    expect(modelMatches('slurm gpu nvidia_a100_80gb_pcie', 'A100')).toBe(true);
    expect(modelMatches('slurm gpu a100', 'H100')).toBe(false);
    expect(modelMatches('slurm gpu a100', 'A10')).toBe(false);
  });
});
