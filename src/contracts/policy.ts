import { z } from 'zod';
import { PolicyLimitsSchema } from './task-limits.js';

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

/**
 * An allowed interpreter that may run a script from the task's own inputs
 * (`argv = [interpreter, "<input path>", …]`): the script is part of the reviewed revision, bound by
 * sha256, so the reviewer reads exactly what runs.
 */
export const InputScriptRuleSchema = z.strictObject({
  interpreter: z.string().startsWith('/', 'interpreters are absolute paths, e.g. "/usr/bin/python3"'),
  script_from_inputs: z.literal(true),
  /**
   * Run the interpreter in its isolated mode where it has one (Python: `-E -s`, no PYTHON* variables
   * and no user site; bash: `-p`, no BASH_ENV and no imported functions; src/domain/policy/run-argv.ts), so only
   * the reviewed script and the host's own libraries load. Default true.
   */
  isolated: z.boolean().default(true),
});

/** A script rule: pinned on the host, or taken from the inputs. */
export const ScriptRuleSchema = z.union([AllowedScriptSchema, InputScriptRuleSchema]);
/** A script rule. */
export type ScriptRule = z.infer<typeof ScriptRuleSchema>;

/** A container image the policy allows by exact reference, optionally with the digest it must resolve to. */
export const AllowedImageSchema = z.strictObject({
  ref: z.string().min(1).max(512),
  digest: z
    .string()
    .regex(/^sha256:[0-9a-f]{64}$/, 'a digest like "sha256:<64 hex>"')
    .optional(),
});

/** The policy section of the master config. */
export const PolicySchema = z.strictObject({
  executables: z.array(AllowedExecutableSchema).max(256).default([]),
  scripts: z.array(ScriptRuleSchema).max(256).default([]),
  refused_env: z.array(z.string().min(1)).max(256).default(['LD_PRELOAD', 'LD_LIBRARY_PATH', 'LD_AUDIT']),
  max_cards: z.number().int().min(1).max(64).default(8),
  max_time_limit_seconds: z.number().int().min(1).max(604800).default(86400),
  /** Whether a spec may ask for `network: "host"` without an error finding. */
  allow_network: z.boolean().default(false),
  /** Container images allowed by exact reference; anything else must be pinned by digest. */
  images: z.array(AllowedImageSchema).max(256).default([]),
  /** Absolute host paths a sandboxed task never sees (beyond the data dirs, /root and /home). */
  hidden_paths: z
    .array(z.string().startsWith('/', 'hidden paths are absolute, e.g. "/srv/secrets"').max(4096))
    .max(256)
    .default([]),
  /** Most bytes of inputs one task may carry (sum of sizes). */
  max_input_bytes: z
    .number()
    .int()
    .min(0)
    .default(256 * 1024 * 1024),
  /** Most input files one task may carry. */
  max_input_files: z.number().int().min(0).max(10000).default(1000),
  /** Bytes of stored inputs each principal may hold (each blob counted once per uploader). */
  input_quota_bytes: z
    .number()
    .int()
    .min(0)
    .default(2 * 1024 * 1024 * 1024),
  /**
   * Interpreter- and loader-control env names (src/domain/policy/env-control.ts) a spec may set: each is then a
   * warning for the reviewer instead of an error. LD_PRELOAD, LD_LIBRARY_PATH and LD_AUDIT stay refused.
   */
  allowed_control_env: z.array(z.string().min(1).max(256)).max(256).default([]),
  /**
   * Whether inputs an interpreter loads on its own (`*.pyc`, `__pycache__/`, `*.pth`, `sitecustomize.py`,
   * user-site dirs, …; src/domain/policy/implicit-code.ts) are only a warning instead of an error.
   */
  allow_implicit_code: z.boolean().default(false),
  /** Whether tasks may only be placed on workers that run them sandboxed (not `--isolation none`). */
  require_isolation: z.boolean().default(true),
  /**
   * Whether a spec may ask for MIG slices (`cards.mig_profile`, `cards.allow_mig`): `forbid` makes it an
   * error finding (MIG_FORBIDDEN). docs/decisions/0046-mig-slices-as-cards.md.
   */
  mig: z.enum(['allow', 'forbid']).default('allow'),
  /** Per-task resource limits: defaults and maxima per leased card (src/contracts/task-limits.ts). */
  task_limits: PolicyLimitsSchema.prefault({}),
});

/** Operator policy. */
export type Policy = z.infer<typeof PolicySchema>;
/** Operator policy as written in a config file (defaults not yet applied). */
export type PolicyInput = z.input<typeof PolicySchema>;

/** An interpreter script pinned on the host. */
export type AllowedScript = z.infer<typeof AllowedScriptSchema>;

/** The rules that pin a host script (`{interpreter, script, sha256}`), leaving out the inputs rules. */
export function pinnedScripts(scripts: readonly ScriptRule[]): AllowedScript[] {
  return scripts.filter((s): s is AllowedScript => 'script' in s);
}

/** A rule that lets an interpreter run a script from the inputs. */
export type InputScriptRule = z.infer<typeof InputScriptRuleSchema>;

/** The rules that let an interpreter run a script from the task's inputs. */
export function inputScriptRules(scripts: readonly ScriptRule[]): InputScriptRule[] {
  return scripts.filter((s): s is InputScriptRule => 'script_from_inputs' in s);
}

/** The interpreters allowed to run a script from the task's inputs. */
export function inputInterpreters(scripts: readonly ScriptRule[]): string[] {
  return inputScriptRules(scripts).map((s) => s.interpreter);
}
