import { z } from 'zod';
import { ResolvedLimitsSchema } from './task-limits.js';
import { PINNED_IMAGE } from './task-spec.js';

/**
 * A standing grant's scope (docs/mcp-tools.md "Grants"): the fields of a spec a reviewer
 * lets later revisions of one submitter change without a new review. Everything not named here must
 * stay as in the grant's base revision; src/domain/grants/grant.ts evaluates it.
 */

/**
 * A path glob over input paths: `*` and `?` stay within one segment, `**` spans segments. Relative, no
 * `.`/`..`/empty segments, no backslash (input paths never contain one either).
 */
export const InputGlobSchema = z
  .string()
  .min(1)
  .max(256)
  .refine((g) => !g.startsWith('/') && !g.includes('\\') && !g.includes('\0'), {
    message: 'a relative glob like "src/**/*.py" (no leading "/", no backslash)',
  })
  .refine((g) => !g.split('/').some((s) => s === '' || s === '.' || s === '..'), {
    message: 'no ".", ".." or empty segments, e.g. "src/**/*.py"',
  })
  .refine((g) => /^[A-Za-z0-9._*?/+@=,-]+$/.test(g), {
    message: 'only letters, digits, . _ - + @ = , / and the wildcards * ? (no [ ] or { })',
  })
  .refine((g) => g.split('/').filter((s) => s === '**').length <= 3, {
    message: 'at most three "**" segments',
  });

/** One env name the grant lets change, optionally only to the listed values. */
export const GrantEnvRuleSchema = z.strictObject({
  name: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'env names look like MY_VAR')
    .describe('An env name that may change, e.g. "EPOCHS".'),
  values: z
    .array(z.string().max(1024))
    .min(1)
    .max(64)
    .optional()
    .describe('The only values it may take; omit to allow any value.'),
});

/**
 * What arguments past `argv_prefix` may reach (ADR 0029):
 * - `none`: argv is fixed, exactly the prefix;
 * - `script`: more arguments, only where they reach a reviewed script: the prefix is
 *   `[interpreter, script, …]` with an interpreter the policy runs scripts from the inputs with
 *   (`scripts: [{interpreter, script_from_inputs: true}]`) and `script` one of the run's inputs;
 * - `any_unsafe`: more arguments whatever argv[0] is: `make train --eval=…`, `torchrun --no-python …`,
 *   `uv run …` run any command. Only when the grantor widens it on purpose; every view says WIDENED.
 */
export const EXTRA_ARGS = ['none', 'script', 'any_unsafe'] as const;
/** What arguments past the prefix may reach. */
export type ExtraArgs = (typeof EXTRA_ARGS)[number];

/** The scope. */
export const GrantScopeSchema = z.strictObject({
  argv_prefix: z
    .array(z.string().min(1).max(8192))
    .min(1)
    .max(16)
    .describe(
      'The first argv tokens, exact: the executable or interpreter and the script path, e.g. ["/usr/bin/python3", "train.py"]. No option tokens ("-c", "-m", …) after the first.',
    ),
  extra_args: z
    .enum(EXTRA_ARGS)
    .describe(
      'Arguments past the prefix: "none" (argv fixed), "script" (only where argv[1] is an input the policy runs as a script: they go to that reviewed script), or "any_unsafe" (they reach argv[0] whatever it is: for make, uv run, torchrun, … that can run any command). Default: "script" when the base runs a script from its inputs, else "none".',
    ),
  mutable_inputs: z
    .array(InputGlobSchema)
    .max(64)
    .describe(
      'Globs of input paths that may change, be added or removed; every other input stays byte-equal to the base revision.',
    ),
  max_cards: z.number().int().min(1).max(64).describe('Most cards a covered run may lease.'),
  max_time_limit_seconds: z
    .number()
    .int()
    .min(1)
    .max(604800)
    .describe('Largest time_limit_seconds a covered run may ask for.'),
  limits: ResolvedLimitsSchema.describe('Ceilings for the resolved resource limits.'),
  workers: z
    .array(z.string().min(1).max(128))
    .max(64)
    .nullable()
    .describe('Workers spec.worker may name (then it must name one); null: any, as the scheduler picks.'),
  env: z
    .array(GrantEnvRuleSchema)
    .max(64)
    .describe('Env names that may change (never interpreter-control ones).'),
  image: z
    .string()
    .regex(PINNED_IMAGE, 'an image pinned by digest: name@sha256:<64 hex>')
    .nullable()
    .describe('Container runtimes: the one pinned image allowed; null for process runtimes.'),
  max_priority: z.number().int().min(0).max(100).describe('Highest priority a covered run may ask for.'),
});
/** A grant's scope. */
export type GrantScope = z.infer<typeof GrantScopeSchema>;

/**
 * A scope as stored, made current. Grants written before ADR 0029's amendment stored `extra_args` as a boolean:
 * `true` reads as `script` (arguments only where they reach a reviewed script, which narrows such a
 * grant: `make train` with `true` now covers exactly `make train`), `false` as `none`. The row itself is
 * immutable (a trigger), so the reading is done here, once, by the repository's mapper.
 */
export function currentScope(stored: Omit<GrantScope, 'extra_args'> & { extra_args: unknown }): GrantScope {
  const x = stored.extra_args;
  const extra_args: ExtraArgs =
    x === true
      ? 'script'
      : typeof x === 'string' && (EXTRA_ARGS as readonly string[]).includes(x)
        ? (x as ExtraArgs)
        : 'none';
  return { ...stored, extra_args };
}

/** What a coverage question answers (confirm_revision's `grant` and explain_grant). */
export const CoverageViewSchema = z.object({
  covered: z.boolean(),
  grant_id: z.string().nullable(),
  /** The first clause that failed (`{clause: "cards", message: "cards 8 > 4"}`), when not covered. */
  failing: z.object({ clause: z.string(), message: z.string() }).nullable(),
  /** Every clause's message, when covered: the receipt. */
  clauses: z.array(z.object({ clause: z.string(), message: z.string() })),
});
