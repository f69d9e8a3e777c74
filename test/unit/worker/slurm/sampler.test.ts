import { describe, expect, it } from 'vitest';
import { markerPrefix } from '../../../../worker/slurm/job-setup.js';
import { poolCards } from '../../../../worker/slurm/sampler.js';
import { slurmNode } from '../../../support/slurm-node.js';

/** The pool as cards (worker/slurm/sampler.ts): numbering, foreign GPUs, down nodes, copied markers. */

const node = slurmNode;

const prefix = markerPrefix('w1');
const mine = (ids: string[]) => (h: { jobId: string; comment: string | null }) =>
  h.comment?.startsWith(prefix) === true && ids.includes(h.jobId);

describe('poolCards', () => {
  it('numbers the GPUs over the nodes and marks foreign jobs, not its own', () => {
    const cards = poolCards(
      [
        node('n1', {
          usedGpuIndices: [0, 1, 2],
          holders: [
            { jobId: '10', name: 'theirs', comment: null, indices: [0] },
            { jobId: '11', name: 'ours', comment: `${prefix}exec_1`, indices: [1, 2] },
          ],
        }),
        node('n2', { usedGpuIndices: [3] }),
      ],
      mine(['11']),
    );
    expect(cards.map((c) => c.uuid)).toEqual([
      'slurm:n1:gpu0',
      'slurm:n1:gpu1',
      'slurm:n1:gpu2',
      'slurm:n1:gpu3',
      'slurm:n2:gpu0',
      'slurm:n2:gpu1',
      'slurm:n2:gpu2',
      'slurm:n2:gpu3',
    ]);
    expect(cards.map((c) => c.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(cards[0]?.processes[0]?.name).toBe('slurm job 10 theirs');
    expect(cards[1]?.processes).toEqual([]);
    expect(cards[2]?.processes).toEqual([]);
    // Used with no job to name: still not free.
    expect(cards[7]?.processes[0]?.name).toBe('slurm allocation of an unnamed job');
    expect(cards.every((c) => c.memory_used_pct === 0 && c.simulated === false)).toBe(true);
  });

  it('counts a job with a copied marker but an id this worker never recorded as foreign', () => {
    const cards = poolCards(
      [node('n1', { holders: [{ jobId: '99', name: 'copycat', comment: `${prefix}exec_x`, indices: [2] }] })],
      mine(['11']),
    );
    expect(cards[2]?.processes).toHaveLength(1);
  });

  it('labels the GPUs simulated when the operator says they are not real devices (--slurm-simulated-gpus)', () => {
    const real = poolCards([node('n1')], mine([]));
    expect(real.every((c) => c.simulated === false && c.model === 'slurm gpu')).toBe(true);
    const sim = poolCards([node('n1'), node('n2')], mine([]), true);
    expect(sim).toHaveLength(8);
    expect(sim.every((c) => c.simulated === true && c.model === 'slurm gpu (simulated)')).toBe(true);
  });

  it('makes a down or drained node unhealthy, saying why', () => {
    const cards = poolCards(
      [node('n1', { unavailable: true, state: 'IDLE', stateFlags: ['DRAIN'], reason: 'maintenance' })],
      mine([]),
    );
    expect(cards[0]).toMatchObject({
      health: 'failed',
      health_reasons: ['node n1 is IDLE+DRAIN: maintenance'],
    });
  });
});
