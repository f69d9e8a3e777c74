import type { SlurmNode } from '../../worker/slurm/cli/types.js';

/** A Slurm node as the driver reads it (`scontrol show node`): 4 untyped GPUs, none used, unless `over` says. */
export function slurmNode(name: string, over: Partial<SlurmNode> = {}): SlurmNode {
  return {
    name,
    state: 'MIXED',
    stateFlags: [],
    unavailable: false,
    cpus: 16,
    gpus: 4,
    gpusUsed: 0,
    usedGpuIndices: [],
    holders: [],
    reason: null,
    partitions: ['gpu'],
    ...over,
  };
}
