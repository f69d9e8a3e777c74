/**
 * MIG (Multi-Instance GPU) profiles of the card models the broker knows, and the placement rules that
 * say which layouts fit on one card. Pure data and pure functions: the discovery join
 * (`mig-slices.ts`) takes memory from here only when the tool printed none for an instance, and the
 * simulated layouts (`sim-mig-layout.ts`) are validated against it.
 *
 * Sources (docs/decisions/0046-mig-slices-as-cards.md, "Sources"): profile names, IDs, instance counts and
 * placements from NVIDIA's MIG user guide (supported-mig-profiles.html, `nvidia-smi mig -lgip` /
 * `-lgipp` listings); memory in GiB from public `nvidia-smi mig -lgip` dumps of each board. The memory
 * of an instance varies a little by driver (two 3g.20gb on one A100-40GB printed 20224 and 20096 MiB),
 * so a per-instance figure from the tool always wins over this table.
 */

/** The card models with a MIG table here. Anything else in MIG mode is reported without one. */
export const MIG_CARD_MODELS = ['A100-40GB', 'A100-80GB', 'H100-80GB', 'H200'] as const;
/** One card model with a MIG table. */
export type MigCardModel = (typeof MIG_CARD_MODELS)[number];

/** Memory slices of a 7-compute-slice card: placements are in eighths of its memory. */
export const MIG_MEMORY_SLOTS = 8;
/** Compute slices of every card here; a card has at most this many instances. */
export const MIG_COMPUTE_SLICES = 7;

/** One GPU-instance profile of one card model. */
export interface MigProfile {
  /** As printed after `MIG ` (`1g.10gb`, `1g.10gb+me`). */
  name: string;
  /** The profile ID `nvidia-smi mig -cgi` takes and `-lgi` prints. */
  id: number;
  /** Compute slices (the `Ng` of the name). */
  compute_slices: number;
  /** Most instances of this profile on one card. */
  max_instances: number;
  /** Start slots it may be placed at, in eighths of the card's memory (`-lgipp`). */
  placements: readonly number[];
  /** Memory slots one instance takes. */
  placement_size: number;
  /** Memory of one instance in MiB (`-lgip`'s GiB × 1024). */
  memory_mib: number;
  /** False where the figure was inferred rather than read off a dump (see gpu-tools.md). */
  memory_verified: boolean;
}

interface ProfileShape {
  suffix: string;
  id: number;
  compute_slices: number;
  max_instances: number;
  placements: readonly number[];
  placement_size: number;
}

// The seven GPU-instance profiles every 7-slice board here offers, in -lgip order; the boards differ
// only in the memory the name carries. IDs and placements per the MIG guide's -lgip/-lgipp listings.
const SHAPES: readonly ProfileShape[] = [
  {
    suffix: '1g.S',
    id: 19,
    compute_slices: 1,
    max_instances: 7,
    placements: [0, 1, 2, 3, 4, 5, 6],
    placement_size: 1,
  },
  {
    suffix: '1g.S+me',
    id: 20,
    compute_slices: 1,
    max_instances: 1,
    placements: [0, 1, 2, 3, 4, 5, 6],
    placement_size: 1,
  },
  {
    suffix: '1g.D',
    id: 15,
    compute_slices: 1,
    max_instances: 4,
    placements: [0, 2, 4, 6],
    placement_size: 2,
  },
  { suffix: '2g.D', id: 14, compute_slices: 2, max_instances: 3, placements: [0, 2, 4], placement_size: 2 },
  { suffix: '3g.H', id: 9, compute_slices: 3, max_instances: 2, placements: [0, 4], placement_size: 4 },
  { suffix: '4g.H', id: 5, compute_slices: 4, max_instances: 1, placements: [0], placement_size: 4 },
  { suffix: '7g.F', id: 0, compute_slices: 7, max_instances: 1, placements: [0], placement_size: 8 },
];

/** Per board: the GB in the names (single, double, half, full) and -lgip's GiB for each shape above. */
const BOARDS: Record<
  MigCardModel,
  { gb: { S: number; D: number; H: number; F: number }; gib: readonly number[]; inferred?: readonly number[] }
> = {
  // -lgip of an A100-SXM4-40GB (public dumps; one test suite elsewhere prints 39.50 for 7g.40gb).
  'A100-40GB': { gb: { S: 5, D: 10, H: 20, F: 40 }, gib: [4.75, 4.75, 9.75, 9.75, 19.62, 19.62, 39.38] },
  // -lgip of an A100-SXM4-80GB (MIG guide and public dumps).
  'A100-80GB': { gb: { S: 10, D: 20, H: 40, F: 80 }, gib: [9.5, 9.5, 19.5, 19.5, 39.25, 39.25, 79.0] },
  // -lgip of an H100 80GB HBM3 (public dumps).
  'H100-80GB': { gb: { S: 10, D: 20, H: 40, F: 80 }, gib: [9.75, 9.75, 19.62, 19.62, 39.5, 39.5, 79.25] },
  // -lgip of an H200 for 1g.18gb, 1g.18gb+me, 2g.35gb and 7g.141gb (public dump); 1g.35gb takes
  // 2g.35gb's memory (same two memory slots) and 3g/4g.71gb twice that, which matches torch's 69.8 GB
  // (65.0 GiB) on a 3g.71gb slice.
  H200: {
    gb: { S: 18, D: 35, H: 71, F: 141 },
    gib: [16.0, 16.0, 32.5, 32.5, 65.0, 65.0, 140.0],
    inferred: [2, 4, 5],
  },
};

function profilesOf(model: MigCardModel): readonly MigProfile[] {
  const board = BOARDS[model];
  return SHAPES.map((shape, i) => {
    const letter = shape.suffix.split('.')[1]?.[0] as 'S' | 'D' | 'H' | 'F';
    const name = shape.suffix.replace(/\.[SDHF]/, `.${board.gb[letter]}gb`);
    return {
      name,
      id: shape.id,
      compute_slices: shape.compute_slices,
      max_instances: shape.max_instances,
      placements: shape.placements,
      placement_size: shape.placement_size,
      memory_mib: Math.round((board.gib[i] ?? 0) * 1024),
      memory_verified: !(board.inferred ?? []).includes(i),
    };
  });
}

/** Every profile of every known model, computed once (constant data, never mutated). */
export const MIG_PROFILES: Readonly<Record<MigCardModel, readonly MigProfile[]>> = Object.freeze({
  'A100-40GB': profilesOf('A100-40GB'),
  'A100-80GB': profilesOf('A100-80GB'),
  'H100-80GB': profilesOf('H100-80GB'),
  H200: profilesOf('H200'),
});

/** The profile called `name` on `model`, or null when that board has no such profile. */
export function findMigProfile(model: MigCardModel, name: string): MigProfile | null {
  return MIG_PROFILES[model].find((profile) => profile.name === name) ?? null;
}

/**
 * Which MIG table a card takes, from the name nvidia-smi prints and its total memory when known.
 * Null for anything not in the table (an H100 NVL's 94 GB profiles, a GH200, an A30, a B200): those
 * cards still report their instances, with memory only where the tool printed it.
 */
export function migCardModel(name: string, memoryTotalMib: number | null = null): MigCardModel | null {
  const upper = name.toUpperCase();
  if (upper.includes('GH200')) return null;
  if (upper.includes('H200')) return 'H200';
  if (upper.includes('A100')) {
    if (upper.includes('80GB') || (memoryTotalMib !== null && memoryTotalMib >= 64 * 1024))
      return 'A100-80GB';
    if (upper.includes('40GB') || (memoryTotalMib !== null && memoryTotalMib < 64 * 1024)) return 'A100-40GB';
    return null;
  }
  if (upper.includes('H100')) {
    if (upper.includes('NVL') || upper.includes('94GB') || upper.includes('96GB')) return null;
    if (upper.includes('80GB')) return 'H100-80GB';
    if (memoryTotalMib !== null && memoryTotalMib >= 79 * 1024 && memoryTotalMib <= 82 * 1024)
      return 'H100-80GB';
    return null;
  }
  return null;
}

/** A profile name taken apart: `1c.3g.40gb` is a 1-slice compute instance in a 3g.40gb GPU instance. */
export interface MigProfileName {
  /** Compute slices of the compute instance (equal to `gpu_slices` when the name has no `Nc.`). */
  compute_slices: number;
  /** Compute slices of the GPU instance. */
  gpu_slices: number;
  /** The GB the name carries (nominal, not the instance's exact memory). */
  nominal_gb: number;
  /** The GPU-instance profile the name belongs to, without the `Nc.` prefix (`3g.40gb`, `1g.10gb+me`). */
  gpu_instance_profile: string;
}

/** Parses `1g.10gb`, `1g.10gb+me`, `1c.3g.40gb`, `1g.24gb-me`; null for anything else. */
export function parseMigProfileName(raw: string): MigProfileName | null {
  const match = /^(?:([1-8])c\.)?(([1-8])g\.(\d{1,4})gb(?:[+-][a-z][a-z.,]{0,15})?)$/.exec(raw.trim());
  if (!match?.[2] || !match[3] || !match[4]) return null;
  const gpuSlices = Number(match[3]);
  const computeSlices = match[1] ? Number(match[1]) : gpuSlices;
  if (computeSlices > gpuSlices) return null;
  return {
    compute_slices: computeSlices,
    gpu_slices: gpuSlices,
    nominal_gb: Number(match[4]),
    gpu_instance_profile: match[2],
  };
}
