import type { Logger } from 'pino';
import type { CardSample } from '../../src/contracts/sample.js';
import type { SlurmPool } from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import { SamplerError } from '../samplers/card-sampler.js';
import type { SlurmDriver } from './cli/driver.js';
import type { SlurmGpuHolder, SlurmNode } from './cli/types.js';
import { markerPrefix } from './job-setup.js';

/**
 * The card sampler of a Slurm worker (docs/decisions/0013-slurm-backend.md). One sample reads the
 * partition's nodes and who holds their GPUs (the driver's `nodes()`, i.e. `scontrol show node/job`)
 * and reports the partition's GPUs as cards 0..N-1 over the nodes in name order:
 *
 *  - uuid `slurm:<node>:gpu<i>`; model `slurm gpu` (Slurm's gres says no more);
 *  - a GPU held by a job without this worker's comment marker carries a pseudo process
 *    `slurm job <id> <name>`, so the master derives BUSY_FOREIGN and the pool's free count drops;
 *  - GPUs of this worker's own jobs carry nothing: the master already counts them through its leases;
 *  - a node that accepts no job (down, drained, not responding) makes its GPUs `failed` (UNHEALTHY);
 *  - `memory_used_pct: 0`: Slurm reports allocation, not VRAM, and allocation is what admits.
 *
 * Every sample also hands this worker's own jobs to `onOwnJobs`, which fences the cluster (jobs of
 * unknown or finished executions are scancelled, recovery.ts).
 */

/** Most cards one sample may carry (the protocol's bound). */
const MAX_CARDS = 64;

/** The sampler plus the pool it saw last (for hello). */
export interface SlurmPoolSampler extends CardSampler {
  /** The partition and nodes as of the latest successful sample; nodes empty before the first. */
  pool(): SlurmPool;
  /**
   * Narrows "ours" to jobs this worker recorded (the daemon passes its store's job ids): a job that
   * merely carries the marker — someone else's sbatch with a copied comment — then counts as foreign
   * until fencing scancels it, so it can never make the pool look freer than it is.
   */
  setOwnJobs(ids: () => ReadonlySet<string>): void;
}

/** Builds the sampler of `partition`. */
export function slurmPoolSampler(deps: {
  driver: SlurmDriver;
  partition: string;
  workerId: string;
  /**
   * The operator says the partition's GPUs are not real devices (a test cluster's fake gres files):
   * the cards are `sim`, tasks get GPU_BROKER_SIMULATED=1, and a qualification runs gloo on CPU and
   * says so, never passing for a GPU result (`--slurm-simulated-gpus`, ADR 0017).
   */
  simulated?: boolean;
  /** The partition's GPUs are Hygon DCUs (`--slurm-gpu-kind hy`): the hello says provider `hy`. */
  gpuKind?: 'nvidia' | 'hy';
  logger?: Logger;
}): SlurmPoolSampler {
  let pool: SlurmPool = { partition: deps.partition, nodes: [] };
  let ownJobs: (() => ReadonlySet<string>) | null = null;
  const prefix = markerPrefix(deps.workerId);
  const simulated = deps.simulated === true;
  const kind = deps.gpuKind ?? 'nvidia';
  return {
    provider: simulated ? 'sim' : kind,
    pool: () => pool,
    setOwnJobs: (ids) => {
      ownJobs = ids;
    },
    async sample(): Promise<CardSample[]> {
      let nodes: SlurmNode[];
      try {
        nodes = await deps.driver.nodes(deps.partition);
      } catch (err) {
        throw new SamplerError('TOOL_FAILED', `slurm: ${errorMessage(err)}`, { tool: 'scontrol' });
      }
      nodes.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      pool = {
        partition: deps.partition,
        nodes: nodes.slice(0, 64).map((n) => ({ name: n.name, gpus: n.gpus, state: n.state.slice(0, 64) })),
      };
      let ids: ReadonlySet<string> | undefined;
      try {
        ids = ownJobs?.();
      } catch (err) {
        throw new SamplerError('TOOL_FAILED', `slurm: cannot read this worker's jobs: ${errorMessage(err)}`, {
          tool: 'scontrol',
        });
      }
      return poolCards(
        nodes,
        (h) => h.comment?.startsWith(prefix) === true && (ids === undefined || ids.has(h.jobId)),
        simulated,
      );
    },
  };
}

/** The cards of a pool's nodes (pure; see the module comment); `isOwn` tells this worker's jobs. */
export function poolCards(
  nodes: readonly SlurmNode[],
  isOwn: (holder: SlurmGpuHolder) => boolean,
  simulated = false,
): CardSample[] {
  const cards: CardSample[] = [];
  for (const node of nodes) {
    const foreign = new Map<number, string>();
    for (const h of node.holders) {
      if (isOwn(h)) continue;
      for (const i of h.indices) foreign.set(i, `slurm job ${h.jobId} ${h.name}`.slice(0, 256));
    }
    // Used indices with no holder we can name (GresUsed says used, no job listed): foreign as well.
    const ours = new Set(node.holders.filter(isOwn).flatMap((h) => h.indices));
    for (const i of node.usedGpuIndices)
      if (!ours.has(i) && !foreign.has(i)) foreign.set(i, 'slurm allocation of an unnamed job');
    for (let i = 0; i < node.gpus && cards.length < MAX_CARDS; i++) {
      const holder = foreign.get(i);
      cards.push({
        index: cards.length,
        uuid: `slurm:${node.name}:gpu${i}`.slice(0, 128),
        model: simulated ? 'slurm gpu (simulated)' : 'slurm gpu',
        memory_used_mib: null,
        memory_total_mib: null,
        memory_used_pct: 0,
        utilization_pct: null,
        temperature_c: null,
        power_w: null,
        health: node.unavailable ? 'failed' : 'ok',
        health_reasons: node.unavailable
          ? [
              `node ${node.name} is ${[node.state, ...node.stateFlags].join('+')}${node.reason ? `: ${node.reason}` : ''}`.slice(
                0,
                256,
              ),
            ]
          : [],
        processes: holder === undefined ? [] : [{ pid: 0, name: holder, used_memory_mib: null }],
        simulated,
      });
    }
  }
  return cards;
}
