import { z } from 'zod';

/**
 * What a worker reports about its cards on every sample. Unknown readings are `null`, never 0:
 * `[N/A]` from nvidia-smi means "not measured", and a 0 would claim a clean card.
 */

/** Which card provider a worker samples with. `sim` cards are simulated and say so everywhere. */
export const ProviderSchema = z.enum(['nvidia', 'hy', 'sim']);
/** Card provider. */
export type Provider = z.infer<typeof ProviderSchema>;

/** A compute process seen on a card. */
export const CardProcessSchema = z.object({
  pid: z.number().int(),
  name: z.string().max(256),
  used_memory_mib: z.number().nullable(),
});
/** A compute process seen on a card. */
export type CardProcess = z.infer<typeof CardProcessSchema>;

/** Card health as far as the sampler can tell. `unknown` when nothing was measured. */
export const CardHealthSchema = z.enum(['ok', 'degraded', 'failed', 'unknown']);
/** Card health. */
export type CardHealth = z.infer<typeof CardHealthSchema>;

/**
 * Card indexes (docs/decisions/0046-mig-slices-as-cards.md). Below 256 an index is a whole card, as
 * `nvidia-smi` numbers it. From 256 on it is one MIG compute instance of a card in MIG mode, encoded
 * as `256 + parent·128 + gi·8 + ci` so that every table, JSON array and wire field that holds a card
 * index holds a slice unchanged, and a slice's index never collides with a whole card's.
 */
export const MIG_INDEX_BASE = 256;
/** Largest whole-card index. */
export const MAX_WHOLE_CARD_INDEX = 255;
/** Largest GPU-instance id (mig-minors runs gi0..gi14) and compute-instance id (ci0..ci7). */
export const MAX_GPU_INSTANCE = 14;
export const MAX_COMPUTE_INSTANCE = 7;
/** Largest index a card or slice can have: GPU 255, GI 14, CI 7. */
export const MAX_CARD_INDEX =
  MIG_INDEX_BASE + MAX_WHOLE_CARD_INDEX * 128 + MAX_GPU_INSTANCE * 8 + MAX_COMPUTE_INSTANCE;

/** What a card index names: a whole card, or compute instance `ci` of GPU instance `gi` of card `parent`. */
export type CardKey =
  | { kind: 'card'; index: number }
  | { kind: 'mig'; parent: number; gi: number; ci: number };

/** The index of a MIG slice; throws `RangeError` outside GPU 0..255, GI 0..14, CI 0..7. */
export function migCardIndex(parent: number, gi: number, ci: number): number {
  const ok = (n: number, max: number) => Number.isInteger(n) && n >= 0 && n <= max;
  if (!ok(parent, MAX_WHOLE_CARD_INDEX) || !ok(gi, MAX_GPU_INSTANCE) || !ok(ci, MAX_COMPUTE_INSTANCE))
    throw new RangeError(`no MIG slice GPU ${parent} GI ${gi} CI ${ci} (GPU 0..255, GI 0..14, CI 0..7)`);
  return MIG_INDEX_BASE + parent * 128 + gi * 8 + ci;
}

/** Decodes a card index (see `MIG_INDEX_BASE`); null for one no card or slice can have. */
export function cardKey(index: number): CardKey | null {
  if (!Number.isInteger(index) || index < 0 || index > MAX_CARD_INDEX) return null;
  if (index < MIG_INDEX_BASE) return { kind: 'card', index };
  const rest = index - MIG_INDEX_BASE;
  const parent = Math.floor(rest / 128);
  const gi = Math.floor((rest % 128) / 8);
  if (gi > MAX_GPU_INSTANCE) return null;
  return { kind: 'mig', parent, gi, ci: rest % 8 };
}

/** How people read a card index: `3` for a whole card, `0:mig:2/0` for a slice (GPU 0, GI 2, CI 0). */
export function cardLabel(index: number): string {
  const key = cardKey(index);
  return key?.kind === 'mig' ? `${key.parent}:mig:${key.gi}/${key.ci}` : String(index);
}

/** Reads `3` or `0:mig:2/0` back into an index; null when it is neither. */
export function parseCardLabel(text: string): number | null {
  if (/^\d{1,3}$/.test(text)) {
    const n = Number(text);
    return n <= MAX_WHOLE_CARD_INDEX ? n : null;
  }
  const m = /^(\d{1,3}):mig:(\d{1,2})\/(\d)$/.exec(text);
  if (!m) return null;
  try {
    return migCardIndex(Number(m[1]), Number(m[2]), Number(m[3]));
  } catch {
    return null;
  }
}

/** What a profile name is made of (`1g.10gb+me`): what a reviewer or operator reads is never more. */
const PROFILE_CHARS = /^[0-9a-z.+]+$/;

/** A card's MIG mode (`--query-gpu=mig.mode.current`): null where the tool has no such field. */
export const MigModeSchema = z.enum(['enabled', 'disabled']);
/** A card's MIG mode. */
export type MigMode = z.infer<typeof MigModeSchema>;

/**
 * What makes a card a MIG slice: its parent, its GPU and compute instance, its profile, and the minors
 * of its two capability nodes (`/dev/nvidia-caps/nvidia-cap<M>`) that the sandbox binds. The fields of
 * `MigSlice` in worker/samplers/mig-slices.ts that a master needs; `model` of the card is the parent's,
 * `memory_total_mib` the instance's, `uuid` the slice's `MIG-` uuid.
 */
export const CardMigSchema = z.object({
  parent_index: z.number().int().min(0).max(MAX_WHOLE_CARD_INDEX),
  parent_uuid: z.string().min(1).max(128),
  /** The compute instance's profile (`1g.10gb`, or `1c.3g.40gb` for part of a GPU instance). */
  profile: z.string().regex(PROFILE_CHARS).max(64),
  /** The GPU instance's profile (`3g.40gb`). */
  gpu_instance_profile: z.string().regex(PROFILE_CHARS).max(64),
  gpu_instance: z.number().int().min(0).max(MAX_GPU_INSTANCE),
  compute_instance: z.number().int().min(0).max(MAX_COMPUTE_INSTANCE),
  /** Compute slices of the instance (1..7 of a card's 7): the smallest slice that fits is taken first. */
  compute_slices: z.number().int().min(1).max(7),
  /** Minor of the GPU-instance access node; null when it could not be read (the slice is never granted). */
  gi_access_minor: z.number().int().min(0).max(1_048_575).nullable(),
  /** Minor of the compute-instance access node; null when it could not be read. */
  ci_access_minor: z.number().int().min(0).max(1_048_575).nullable(),
  /** Where the memory figure came from: the tool's per-instance figure, or the model's profile table. */
  memory_source: z.enum(['instance', 'profile-table']).nullable(),
});
/** A slice's MIG facts. */
export type CardMig = z.infer<typeof CardMigSchema>;

/** One card in one sample, without the index/`mig` consistency check (for `.pick` and friends). */
export const CardSampleObjectSchema = z.object({
  /** 0..255 a whole card; from 256 a MIG slice (see `MIG_INDEX_BASE`). */
  index: z.number().int().min(0).max(MAX_CARD_INDEX),
  uuid: z.string().min(1).max(128),
  model: z.string().max(128),
  memory_used_mib: z.number().nullable(),
  memory_total_mib: z.number().nullable(),
  /** VRAM in use as a percentage, when the tool reports only that (hy-smi's table); MiB win when both exist. */
  memory_used_pct: z.number().nullable().optional(),
  utilization_pct: z.number().nullable(),
  temperature_c: z.number().nullable(),
  power_w: z.number().nullable(),
  health: CardHealthSchema,
  /** Human-readable reasons behind a non-ok health (e.g. "ecc.uncorrected=3"). */
  health_reasons: z.array(z.string().max(256)).max(32),
  processes: z.array(CardProcessSchema).max(1024),
  simulated: z.boolean(),
  /**
   * A whole card's MIG mode. `enabled`: the card is split into the slices that follow it in the sample
   * and is never leased whole. Absent or null: not known (older workers, other vendors) — not MIG.
   */
  mig_mode: MigModeSchema.nullable().optional(),
  /** Present exactly on a MIG slice (index ≥ 256). Older workers never send it. */
  mig: CardMigSchema.optional(),
});

/** One card in one sample: a slice's index is the encoding of its `mig` block, a whole card has none. */
export const CardSampleSchema = CardSampleObjectSchema.superRefine((card, ctx) => {
  const key = cardKey(card.index);
  if (key?.kind === 'mig') {
    const mig = card.mig;
    if (
      mig === undefined ||
      mig.parent_index !== key.parent ||
      mig.gpu_instance !== key.gi ||
      mig.compute_instance !== key.ci
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['mig'],
        message: `card ${card.index} is MIG slice ${cardLabel(card.index)}; its mig block must say so`,
      });
    }
    if (card.mig_mode != null)
      ctx.addIssue({ code: 'custom', path: ['mig_mode'], message: 'a MIG slice has no MIG mode of its own' });
  } else if (key === null) {
    ctx.addIssue({ code: 'custom', path: ['index'], message: `${card.index} is no card or MIG slice index` });
  } else if (card.mig !== undefined) {
    ctx.addIssue({ code: 'custom', path: ['mig'], message: 'a whole card (index < 256) has no mig block' });
  }
});
/** One card in one sample. */
export type CardSample = z.infer<typeof CardSampleSchema>;
