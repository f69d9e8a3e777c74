import { z } from 'zod';

/**
 * The task spec an agent proposes (DESIGN §5). Names are final; unknown keys are refused.
 * Policy (which executables, env names, card and time limits) is checked separately and reported as
 * findings, so that a spec that parses but breaks policy can still be saved as a draft and fixed.
 */

/** Largest serialized spec accepted, in bytes (UTF-8 of its JSON). */
export const MAX_SPEC_BYTES = 256 * 1024;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A relative path beneath the task's output dir: no absolute paths, no `..`, no empty segments. */
export const OutputPathSchema = z
  .string()
  .min(1)
  .max(512)
  .refine((p) => !p.startsWith('/') && !p.startsWith('\\'), {
    message: 'must be relative to the output dir, e.g. "results/metrics.json"',
  })
  .refine((p) => !p.split(/[\\/]/).some((seg) => seg === '..' || seg === '.' || seg === ''), {
    message: 'must not contain ".", ".." or empty segments, e.g. "results/metrics.json"',
  })
  .refine((p) => !p.includes('\0'), { message: 'must not contain NUL' });

/** Largest single input file, in bytes (the policy's `max_input_bytes` bounds a task's total). */
export const MAX_INPUT_FILE_BYTES = 1024 * 1024 * 1024;
/** Most input files a spec may list (the policy's `max_input_files` is usually lower). */
export const MAX_INPUT_FILES = 10000;
/** A lowercase hex sha256. */
export const Sha256Schema = z.string().regex(/^[0-9a-f]{64}$/, 'a lowercase hex sha256 (64 characters)');

/**
 * A relative path beneath the task's working dir (`/task` in the sandbox) where an input is placed: the
 * output path rules, plus no backslash (one spelling per path) and not under `out/` (the outputs' dir).
 */
export const InputPathSchema = OutputPathSchema.refine((p) => !p.includes('\\'), {
  message: 'use "/" between segments, e.g. "src/train.py"',
}).refine((p) => p.split('/')[0] !== 'out', {
  message: 'inputs may not be placed under "out/", the output dir; e.g. "src/train.py"',
});

/** One input file: content named by sha256 (uploaded first with upload_inputs), placed read-only at `path`. */
export const InputFileSchema = z.strictObject({
  path: InputPathSchema,
  sha256: Sha256Schema,
  size: z.number().int().min(0).max(MAX_INPUT_FILE_BYTES),
  /** Placed with the executable bit (0555 instead of 0444). */
  executable: z.boolean().optional(),
});
/** One input file. */
export type InputFile = z.infer<typeof InputFileSchema>;

/**
 * The input manifest: unique paths, and no path below another one (`a` and `a/b` cannot both be files).
 */
export const InputsSchema = z
  .array(InputFileSchema)
  .max(MAX_INPUT_FILES)
  .refine((inputs) => new Set(inputs.map((i) => i.path)).size === inputs.length, {
    message: 'each input path may be listed once',
  })
  .refine(
    (inputs) => {
      const files = new Set(inputs.map((i) => i.path));
      return inputs.every((i) => {
        const parts = i.path.split('/');
        for (let n = 1; n < parts.length; n++) if (files.has(parts.slice(0, n).join('/'))) return false;
        return true;
      });
    },
    { message: 'an input path may not lie below another input file, e.g. "a" and "a/b"' },
  );

/** A data mount's name, as the operator declares it on a worker (`imagenet-val`). */
export const MountNameSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9._-]{0,63}$/, 'a mount name like "imagenet-val" (lowercase, digits, . _ -)');

const ArgvSchema = z.array(z.string().max(8192)).min(1).max(1024);
const EnvSchema = z
  .record(z.string().regex(ENV_NAME, 'env names look like MY_VAR'), z.string().max(32768))
  .optional();

/** An image reference pinned by digest: `name@sha256:<64 hex>`. */
export const PINNED_IMAGE = /^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$/;

/** A process on the worker host, run inside the worker's sandbox (bubblewrap) with only its cards. */
export const ProcessRuntimeSchema = z.strictObject({
  kind: z.literal('process'),
  argv: ArgvSchema,
  env: EnvSchema,
});

/**
 * A container run by the worker's engine (podman or docker). `image` must be pinned by digest
 * (`name@sha256:…`) or be listed by exact reference in the policy's `images`; `argv` runs inside it.
 */
export const ContainerRuntimeSchema = z.strictObject({
  kind: z.literal('container'),
  image: z
    .string()
    .min(1)
    .max(512)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._/:@-]*$/, 'an image reference, e.g. "localhost/train@sha256:<64 hex>"'),
  argv: ArgvSchema,
  env: EnvSchema,
});

/** How the task runs. */
export const RuntimeSchema = z.discriminatedUnion('kind', [ProcessRuntimeSchema, ContainerRuntimeSchema]);
/** How the task runs. */
export type Runtime = z.infer<typeof RuntimeSchema>;

/** Network a task may use: `none` (loopback only, the default) or `host`. */
export const NetworkModeSchema = z.enum(['none', 'host']);
/** Network a task may use. */
export type NetworkMode = z.infer<typeof NetworkModeSchema>;

/** The task spec. */
export const TaskSpecSchema = z.strictObject({
  title: z.string().min(1).max(200),
  objective: z.string().min(1).max(8000),
  success_criteria: z.string().min(1).max(8000),
  cards: z.strictObject({
    count: z.number().int().min(1).max(64),
    model: z.string().min(1).max(128).optional(),
    min_memory_mib: z.number().int().min(1).optional(),
  }),
  worker: z.string().min(1).max(128).optional(),
  priority: z.number().int().min(0).max(100).optional(),
  runtime: RuntimeSchema,
  /**
   * Network inside the sandbox: `none` (default: loopback only) or `host` (the host's network). `host`
   * is a policy finding unless the operator's policy sets `allow_network`; the reviewer sees it either way.
   */
  network: NetworkModeSchema.optional(),
  outputs: z
    .array(z.strictObject({ path: OutputPathSchema, required: z.boolean() }))
    .max(64)
    .refine((outputs) => new Set(outputs.map((o) => o.path)).size === outputs.length, {
      message: 'each output path may be declared once',
    })
    .default([]),
  /**
   * Files placed read-only in the task's working dir before it starts, each named by sha256; the
   * revision digest covers them, so approving a revision approves exactly these bytes.
   */
  inputs: InputsSchema.optional(),
  /** Named data mounts the operator declared on workers (`--mount NAME=PATH`), bound read-only. */
  mounts: z
    .array(MountNameSchema)
    .max(16)
    .refine((m) => new Set(m).size === m.length, { message: 'each mount may be named once' })
    .optional(),
  time_limit_seconds: z.number().int().min(1).max(604800),
  notes: z.string().max(65536).optional(),
});

/** A parsed, validated task spec. */
export type TaskSpec = z.infer<typeof TaskSpecSchema>;
/** A task spec as a client may send it (defaults not yet applied). */
export type TaskSpecInput = z.input<typeof TaskSpecSchema>;
