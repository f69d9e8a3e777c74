import type { Logger } from 'pino';
import { type CardSample, migCardIndex } from '../../src/contracts/sample.js';
import { MAX_SAMPLE_CARDS, type SlurmPool } from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import { SamplerError } from '../samplers/card-sampler.js';
import { parseMigProfileName } from '../samplers/mig-profiles.js';
import type { SlurmDriver } from './cli/driver.js';
import {
  type GresConfRecord,
  type GresPosition,
  nodeGresPositions,
  type PoolGres,
  type PoolGresCard,
  parseGresConf,
  sliceOfFiles,
} from './cli/gres.js';
import type { SlurmGpuHolder, SlurmNode } from './cli/types.js';
import { markerPrefix } from './job-setup.js';

/**
 * The card sampler of a Slurm worker (docs/decisions/0013-slurm-backend.md). One sample reads the
 * partition's nodes and who holds their GPUs (the driver's `nodes()`, i.e. `scontrol show node/job`)
 * and reports the partition's GPUs as cards 0..N-1 over the nodes in name order:
 *
 *  - uuid `slurm:<node>:gpu<i>`; model `slurm gpu`, followed by the GPU's GRES type where the node's
 *    `Gres=` types it (`gpu:h100:4` → `slurm gpu h100`; a slice's AutoDetect type less its profile,
 *    `nvidia_a100_80gb_pcie_1g.10gb` → `slurm gpu nvidia_a100_80gb_pcie`): a spec's `cards.model` and a
 *    model quota then match it by words (`H100`, `A100`); an untyped GPU says no more than `slurm gpu`;
 *  - a GPU held by a job without this worker's comment marker carries a pseudo process
 *    `slurm job <id> <name>`, so the master derives BUSY_FOREIGN and the pool's free count drops;
 *  - GPUs of this worker's own jobs carry nothing: the master already counts them through its leases;
 *  - a node that accepts no job (down, drained, not responding) makes its GPUs `failed` (UNHEALTHY);
 *  - `memory_used_pct: 0`: Slurm reports allocation, not VRAM, and allocation is what admits.
 *
 * Every sample also hands this worker's own jobs to `onOwnJobs`, which fences the cluster (jobs of
 * unknown or finished executions are scancelled, recovery.ts).
 */

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
  /** What the latest sample learnt of the GRES (types, device files); null before the first. */
  gres(): PoolGres | null;
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
  /**
   * The operator's gres.conf text, null when unreadable; default the driver's (beside slurm.conf). Read
   * every sample, so a re-partitioned node's new slices show at the next one (ADR 0046 §7).
   */
  gresConf?: () => Promise<string | null>;
  logger?: Logger;
}): SlurmPoolSampler {
  let pool: SlurmPool = { partition: deps.partition, nodes: [] };
  let gres: PoolGres | null = null;
  const readGresConf = deps.gresConf ?? (() => deps.driver.gresConf());
  let ownJobs: (() => ReadonlySet<string>) | null = null;
  const prefix = markerPrefix(deps.workerId);
  const simulated = deps.simulated === true;
  const kind = deps.gpuKind ?? 'nvidia';
  return {
    provider: simulated ? 'sim' : kind,
    pool: () => pool,
    gres: () => gres,
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
      // Only typed GRES can hold MIG slices; an untyped pool never reads gres.conf.
      const typed = nodes.some((n) => n.gresTypes !== undefined);
      const text = typed && kind === 'nvidia' ? await readGresConf().catch(() => null) : null;
      const sampled = poolSample(
        nodes,
        (h) => h.comment?.startsWith(prefix) === true && (ids === undefined || ids.has(h.jobId)),
        simulated,
        text === null ? null : parseGresConf(text),
      );
      gres = sampled.gres;
      return sampled.cards;
    },
  };
}

/** The cards of a pool and what it knew of their GRES. */
export interface PoolSample {
  cards: CardSample[];
  gres: PoolGres;
}

/**
 * The cards of a pool's nodes (pure; see the module comment); `isOwn` tells this worker's jobs.
 * `gresConf`: the GPU records of the operator's gres.conf, null when it could not be read.
 */
export function poolCards(
  nodes: readonly SlurmNode[],
  isOwn: (holder: SlurmGpuHolder) => boolean,
  simulated = false,
  gresConf: readonly GresConfRecord[] | null = null,
): CardSample[] {
  return poolSample(nodes, isOwn, simulated, gresConf).cards;
}

/** {@link poolCards} with what it learnt of the GRES (see PoolGres). */
export function poolSample(
  nodes: readonly SlurmNode[],
  isOwn: (holder: SlurmGpuHolder) => boolean,
  simulated = false,
  gresConf: readonly GresConfRecord[] | null = null,
): PoolSample {
  const cards: CardSample[] = [];
  const gresCards = new Map<number, PoolGresCard>();
  const files = new Map<string, Array<readonly string[] | null>>();
  const parents = new Map<string, number>();
  let whole = 0;
  let hasSlices = false;
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
    const positions = nodeGresPositions(
      node.name,
      node.gresTypes ?? [{ type: null, count: node.gpus }],
      gresConf ?? [],
    );
    files.set(
      node.name,
      positions.map((p) => p.files),
    );
    let unresolved = 0;
    for (let i = 0; i < positions.length && cards.length < MAX_SAMPLE_CARDS; i++) {
      const pos = positions[i] as GresPosition;
      const holder = foreign.get(i);
      const base: CardSample = {
        index: whole,
        uuid: `slurm:${node.name}:gpu${i}`.slice(0, 128),
        model: slurmCardModel(pos, simulated),
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
      };
      if (pos.profile === null) {
        if (whole >= MAX_WHOLE_CARDS) continue;
        cards.push(base);
        gresCards.set(whole, { node: node.name, position: i, type: pos.type, profile: null });
        whole++;
        continue;
      }
      hasSlices = true;
      const card = sliceCard(base, node.name, pos, parents, unresolved);
      // Two gres.conf lines naming the same capability nodes: the second is no slice of its own.
      if (card === null || gresCards.has(card.index)) continue;
      if (card.mig?.gi_access_minor === null) unresolved++;
      cards.push(card);
      gresCards.set(card.index, { node: node.name, position: i, type: pos.type, profile: pos.profile });
    }
  }
  return { cards, gres: { cards: gresCards, files, hasSlices } };
}

/**
 * A pool card's model: `slurm gpu`, then the GRES type where there is one (a slice's less its profile,
 * which its `mig` fields carry; a type that is only the profile names no model), then ` (simulated)` on
 * a simulated pool.
 */
export function slurmCardModel(pos: Pick<GresPosition, 'type' | 'profile'>, simulated: boolean): string {
  let type = pos.type;
  if (type !== null && pos.profile !== null) {
    const lower = type.toLowerCase();
    if (lower === pos.profile) type = null;
    else if (lower.endsWith(`_${pos.profile}`)) type = type.slice(0, -pos.profile.length - 1);
  }
  // The sample's model is at most 128 characters, " (simulated)" included.
  const model = type === null || type === '' ? 'slurm gpu' : `slurm gpu ${type}`.slice(0, 110);
  return simulated ? `${model} (simulated)` : model;
}

/** Whole cards a pool reports at most (indexes below MIG_INDEX_BASE). */
const MAX_WHOLE_CARDS = 64;

/**
 * A MIG slice of a pool as a card (docs/slurm.md "MIG slices"). Its index encodes a pool-wide parent
 * number (one per node and parent device, in the order met) with the GPU and compute instance its
 * capability files name; its minors are those files'. Without files (no gres.conf line, AutoDetect) the
 * slice is still shown, with health `unknown`, null minors and instances numbered on its node: the
 * scheduler never grants it (slots.ts), since no rank could bind it. Null when no index is left.
 */
function sliceCard(
  base: CardSample,
  node: string,
  pos: GresPosition,
  parents: Map<string, number>,
  unresolvedBefore: number,
): CardSample | null {
  const profile = pos.profile as string;
  const name = parseMigProfileName(profile);
  const slice = pos.files === null ? null : sliceOfFiles(pos.files);
  const parentKey = slice === null ? `${node}/unresolved` : `${node}/nvidia${slice.parent}`;
  let parent = parents.get(parentKey);
  if (parent === undefined) {
    parent = parents.size;
    parents.set(parentKey, parent);
  }
  const gi = slice?.gpuInstance ?? Math.floor(unresolvedBefore / 8);
  const ci = slice?.computeInstance ?? unresolvedBefore % 8;
  if (parent > 255 || gi > 14) return null;
  const missing =
    slice !== null
      ? []
      : [
          pos.files === null
            ? `gres.conf names no device files for ${node}'s ${profile} slice: no rank could bind it`
            : `gres.conf's files for ${node}'s ${profile} slice are not one /dev/nvidia<N> and two of its nvidia-caps nodes`,
        ];
  return {
    ...base,
    index: migCardIndex(parent, gi, ci),
    health: missing.length > 0 && base.health === 'ok' ? 'unknown' : base.health,
    health_reasons: [...base.health_reasons, ...missing].slice(0, 32),
    mig: {
      parent_index: parent,
      parent_uuid: `slurm:${node}:nvidia${slice?.parent ?? '?'}`.slice(0, 128),
      profile,
      gpu_instance_profile: name?.gpu_instance_profile ?? profile,
      gpu_instance: gi,
      compute_instance: ci,
      compute_slices: Math.min(7, Math.max(1, name?.compute_slices ?? 1)),
      gi_access_minor: slice?.giAccessMinor ?? null,
      ci_access_minor: slice?.ciAccessMinor ?? null,
      memory_source: null,
    },
  };
}
