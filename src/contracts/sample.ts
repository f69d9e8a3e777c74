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

/** One card in one sample. */
export const CardSampleSchema = z.object({
  index: z.number().int().min(0).max(255),
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
});
/** One card in one sample. */
export type CardSample = z.infer<typeof CardSampleSchema>;
