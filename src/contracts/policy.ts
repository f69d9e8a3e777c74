import { z } from 'zod';

/**
 * Operator policy: what a task spec may do. Lives in the master's config file under `policy`.
 */

/** An allowed executable, optionally pinned by sha256 of its bytes. */
export const AllowedExecutableSchema = z.strictObject({
  path: z.string().startsWith('/', 'executables are absolute paths, e.g. "/usr/bin/python3"'),
  sha256: z
    .string()
    .regex(/^[0-9a-f]{64}$/, 'a lowercase hex sha256')
    .optional(),
});

/**
 * An allowed script run by an interpreter (`argv = [interpreter, script, …]`), pinned by the script's
 * sha256. The bundled qualification workload is allowed this way by default.
 */
export const AllowedScriptSchema = z.strictObject({
  interpreter: z.string().startsWith('/'),
  script: z.string().startsWith('/'),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});

/** The policy section of the master config. */
export const PolicySchema = z.strictObject({
  executables: z.array(AllowedExecutableSchema).max(256).default([]),
  scripts: z.array(AllowedScriptSchema).max(256).default([]),
  refused_env: z.array(z.string().min(1)).max(256).default(['LD_PRELOAD', 'LD_LIBRARY_PATH', 'LD_AUDIT']),
  max_cards: z.number().int().min(1).max(64).default(8),
  max_time_limit_seconds: z.number().int().min(1).max(604800).default(86400),
});

/** Operator policy. */
export type Policy = z.infer<typeof PolicySchema>;
