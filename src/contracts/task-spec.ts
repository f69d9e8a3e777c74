import { z } from 'zod';
import { codePointName, HIDDEN_CHAR } from './hidden-chars.js';
import { SpecLimitsSchema } from './task-limits.js';

/**
 * The task spec an agent proposes (docs/mcp-tools.md). Names are final; unknown keys are refused.
 * Policy (which executables, env names, card and time limits) is checked separately and reported as
 * findings, so that a spec that parses but breaks policy can still be saved as a draft and fixed.
 */

/**
 * A MIG profile name as `nvidia-smi` prints it (`1g.10gb`, `3g.40gb`, `1g.10gb+me`, or a compute
 * instance of part of a GPU instance, `1c.3g.40gb`): docs/decisions/0046-mig-slices-as-cards.md.
 */
export const MIG_PROFILE_NAME = /^(?:[1-7]c\.)?[1-7]g\.[0-9]{1,3}gb(?:\+me)?$/;

/** Largest serialized spec accepted, in bytes (UTF-8 of its JSON). */
export const MAX_SPEC_BYTES = 256 * 1024;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Longest path segment, in UTF-8 bytes: what Linux file systems accept (NAME_MAX). */
export const MAX_SEGMENT_BYTES = 255;

/**
 * The UTF-8 length of `s` as TextEncoder would encode it (a lone surrogate as U+FFFD, 3 bytes), counted
 * without encoding: a spec names up to thousands of paths, and an encoder and a buffer per path was the
 * largest single cost of parsing one (docs/security.md "Fair share between principals").
 */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/**
 * A relative path beneath the task's output dir: no absolute paths, no `..`, no empty segments, no
 * hidden characters (a reviewer must read the name as it is), segments of at most 255 bytes.
 */
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
  .refine((p) => !p.includes('\0'), { message: 'must not contain NUL' })
  .superRefine((p, ctx) => {
    const hidden = HIDDEN_CHAR.exec(p);
    if (hidden)
      ctx.addIssue({
        code: 'custom',
        message: `must not contain control, bidi or zero-width characters (found ${codePointName(hidden[0])}); rename the file with visible characters only`,
      });
    if (p.split('/').some((seg) => utf8Length(seg) > MAX_SEGMENT_BYTES))
      ctx.addIssue({
        code: 'custom',
        message: `each segment must be at most ${MAX_SEGMENT_BYTES} bytes in UTF-8 (the file-system limit); shorten the name`,
      });
  })
  .describe(
    'Path of a file your program writes, RELATIVE to $GPU_BROKER_OUTPUT_DIR (/task/out inside the sandbox), e.g. "results/metrics.json"; 1 to 512 characters, no leading "/", no "." or ".." segments. Your program must create subdirectories itself.',
  );

/** Largest single input file, in bytes (the policy's `max_input_bytes` bounds a task's total). */
export const MAX_INPUT_FILE_BYTES = 1024 * 1024 * 1024;
/** Most input files a spec may list (the policy's `max_input_files` is usually lower). */
export const MAX_INPUT_FILES = 10000;
/** A lowercase hex sha256. */
export const Sha256Schema = z.string().regex(/^[0-9a-f]{64}$/, 'a lowercase hex sha256 (64 characters)');

/**
 * A relative path beneath the task's working dir (`/task` in the sandbox) where an input is placed: the
 * output path rules, plus no backslash (one spelling per path), not under `out/` (the outputs' dir), and
 * no segment starting with `-` (an interpreter would read `-c` or `-m` in argv as an option, not a file).
 */
export const InputPathSchema = OutputPathSchema.refine((p) => !p.includes('\\'), {
  message: 'use "/" between segments, e.g. "src/train.py"',
})
  .refine((p) => !p.split('/').some((seg) => seg.startsWith('-')), {
    message:
      'no segment may start with "-" (argv would read it as an option); rename it, e.g. "src/train.py"',
  })
  .refine((p) => p.split('/')[0] !== 'out', {
    message: 'inputs may not be placed under "out/", the output dir; e.g. "src/train.py"',
  });

/** One input file: content named by sha256 (uploaded first with upload_inputs), placed read-only at `path`. */
export const InputFileSchema = z.strictObject({
  path: InputPathSchema,
  sha256: Sha256Schema.describe('The content digest upload_inputs answered: 64 lowercase hex characters.'),
  size: z
    .number()
    .int()
    .min(0)
    .max(MAX_INPUT_FILE_BYTES)
    .describe('The size in bytes upload_inputs answered (at most 1 GiB per file).'),
  /** Placed with the executable bit (0555 instead of 0444). */
  executable: z.boolean().optional().describe('Place it executable (0555 instead of 0444); default false.'),
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

const ArgvSchema = z
  .array(z.string().max(8192))
  .min(1)
  .max(1024)
  .describe(
    'The command, run exactly as given (no shell: pipes, && and $VAR are plain text). argv[0] must be an ABSOLUTE path to an executable the operator allows, e.g. "/usr/bin/python3"; bare names like "python" are refused. 1 to 1024 items of at most 8192 characters each; put small scripts inline, e.g. ["/usr/bin/python3", "-c", "print(1)"].',
  );
const EnvSchema = z
  .record(z.string().regex(ENV_NAME, 'env names look like MY_VAR'), z.string().max(32768))
  .optional()
  .describe(
    'Environment variables added for the task, e.g. {"PYTHONUNBUFFERED": "1"}; names like MY_VAR, values at most 32768 characters. Reserved (the broker sets them; never set them): GPU_BROKER_*, CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES. Always refused: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, and any name the policy refuses. Names that make an interpreter or the loader run code or load files (PYTHONPATH, PYTHONSTARTUP, NODE_OPTIONS, PERL5OPT, BASH_ENV, LD_*, BROWSER, …) are an error finding (ENV_CONTROL) unless the operator allows that name.',
  );

/** An image reference pinned by digest: `name@sha256:<64 hex>`. */
export const PINNED_IMAGE = /^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$/;

/** A process on the worker host, run inside the worker's sandbox (bubblewrap) with only its cards. */
export const ProcessRuntimeSchema = z.strictObject({
  kind: z.literal('process').describe('"process": argv runs on the worker host inside its sandbox.'),
  argv: ArgvSchema,
  env: EnvSchema,
});

/**
 * A container run by the worker's engine (podman or docker). `image` must be pinned by digest
 * (`name@sha256:…`) or be listed by exact reference in the policy's `images`; `argv` runs inside it.
 */
export const ContainerRuntimeSchema = z.strictObject({
  kind: z.literal('container').describe('"container": argv runs inside `image` under the worker\'s engine.'),
  image: z
    .string()
    .min(1)
    .max(512)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._/:@-]*$/, 'an image reference, e.g. "localhost/train@sha256:<64 hex>"')
    .describe(
      'Image pinned by digest, e.g. "localhost/train@sha256:<64 hex>", or an exact reference the policy lists in its images; at most 512 characters.',
    ),
  argv: ArgvSchema,
  env: EnvSchema,
});

/** How the task runs. */
export const RuntimeSchema = z
  .discriminatedUnion('kind', [ProcessRuntimeSchema, ContainerRuntimeSchema])
  .describe(
    'How the task runs: {"kind": "process", "argv": [...], "env": {...}} (most tasks) or {"kind": "container", "image": "...", "argv": [...]}. Inside the sandbox the task sees only its leased cards, numbered 0..n-1 (2 cards: CUDA_VISIBLE_DEVICES=0,1), cwd and HOME /task, a private /tmp, and the host\'s /usr, /etc, /opt read-only.',
  );
/** How the task runs. */
export type Runtime = z.infer<typeof RuntimeSchema>;

/** Network a task may use: `none` (loopback only, the default) or `host`. */
export const NetworkModeSchema = z.enum(['none', 'host']);
/** Network a task may use. */
export type NetworkMode = z.infer<typeof NetworkModeSchema>;

/** The task spec. */
export const TaskSpecSchema = z
  .strictObject({
    title: z.string().min(1).max(200).describe('Short name of the task, 1 to 200 characters.'),
    objective: z
      .string()
      .min(1)
      .max(8000)
      .describe('What the run should show, for the reviewer; 1 to 8000 characters.'),
    success_criteria: z
      .string()
      .min(1)
      .max(8000)
      .describe(
        'How you and the reviewer will tell it worked (exit code, values in an output); 1 to 8000 characters.',
      ),
    cards: z
      .strictObject({
        count: z
          .number()
          .int()
          .min(1)
          .max(64)
          .describe(
            "How many cards, a whole number from 1 to 64 and within the operator's limit; ask for no more than the task needs.",
          ),
        model: z
          .string()
          .min(1)
          .max(128)
          .optional()
          .describe(
            'Only cards whose model contains this text (see list_cards); omit unless it matters, it lengthens the wait.',
          ),
        min_memory_mib: z
          .number()
          .int()
          .min(1)
          .optional()
          .describe(
            'Only cards with at least this much memory in MiB, a whole number >= 1; omit unless it matters.',
          ),
        per_node: z
          .number()
          .int()
          .min(1)
          .max(64)
          .optional()
          .describe(
            'Multi-node (Slurm workers only): cards on each node, e.g. {"count": 16, "per_node": 8} runs 2 nodes of 8; count must be a multiple of it. Omit for one host.',
          ),
        mig_profile: z
          .string()
          .regex(MIG_PROFILE_NAME, 'a MIG profile name such as 1g.10gb, 3g.40gb or 1g.10gb+me')
          .optional()
          .describe(
            'Run on MIG slices of this profile instead of whole cards, e.g. "1g.10gb" (see list_cards: mig.profile). Each slice is a hardware-isolated part of a card with its own memory; the task sees it as its one CUDA device (CUDA_VISIBLE_DEVICES=MIG-<uuid>). count > 1 gives that many slices on one worker, one per process. Omit for whole cards.',
          ),
        allow_mig: z
          .boolean()
          .optional()
          .describe(
            'true: one MIG slice may do instead of a whole card; with min_memory_mib the smallest slice (or card) with that much memory is taken, e.g. {"count": 1, "min_memory_mib": 10000, "allow_mig": true}. Only with count 1. Omit (false) for a whole card.',
          ),
      })
      .refine((c) => c.per_node === undefined || c.count % c.per_node === 0, {
        message: 'cards.count must be a multiple of cards.per_node (e.g. count 16, per_node 8)',
        path: ['per_node'],
      })
      .refine((c) => c.allow_mig !== true || c.count === 1, {
        message:
          'cards.allow_mig lets one slice stand for one card: use it with count 1, or name cards.mig_profile for several slices',
        path: ['allow_mig'],
      })
      .refine((c) => c.mig_profile === undefined || c.allow_mig !== false, {
        message:
          'cards.mig_profile asks for slices: drop allow_mig false, or drop mig_profile for whole cards',
        path: ['allow_mig'],
      })
      .refine((c) => c.per_node === undefined || (c.mig_profile === undefined && c.allow_mig !== true), {
        message: 'MIG slices are not offered across nodes: drop per_node, or ask for whole cards',
        path: ['per_node'],
      })
      .describe('The cards the task needs, e.g. {"count": 1}. They are given to the task numbered 0..n-1.'),
    worker: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .describe('Run only on this worker id (see list_workers); omit to let the scheduler choose.'),
    priority: z
      .number()
      .int()
      .min(0)
      .max(100)
      .optional()
      .describe('Queue priority, a whole number from 0 to 100 (higher runs first); omit for the default.'),
    /**
     * May the scheduler stop this task to give its cards back to an account asking within its nominal
     * share, while the task's account borrows (docs/operations.md "Borrowing and reclaim")? A preempted
     * run gets SIGTERM, `preemption_grace_seconds`, then SIGKILL, and the same approved revision queues
     * again at its old place (no new review); the next run has GPU_BROKER_PREEMPTED=1. The reviewer sees it.
     */
    preemptible: z
      .boolean()
      .optional()
      .describe(
        'true: the scheduler may stop this task (SIGTERM, grace, SIGKILL) while your account uses more than its nominal share and another account asks for cards within its own; it is queued again at its old place (no new review) and the next run sees GPU_BROKER_PREEMPTED=1, so checkpoint on SIGTERM. Omit (false) for a task that must not be stopped.',
      ),
    preemption_grace_seconds: z
      .number()
      .int()
      .min(1)
      .max(600)
      .optional()
      .describe(
        "Seconds between SIGTERM and SIGKILL when this task is preempted (1 to 600), to checkpoint; omit for the operator's kill grace.",
      ),
    runtime: RuntimeSchema,
    /**
     * Network inside the sandbox: `none` (default: loopback only) or `host` (the host's network). `host`
     * is a policy finding unless the operator's policy sets `allow_network`; the reviewer sees it either way.
     */
    network: NetworkModeSchema.optional().describe(
      'Network inside the sandbox: "none" (default, loopback only) or "host" (the host\'s network; refused unless the operator\'s policy allows network). Do not plan on downloading anything.',
    ),
    outputs: z
      .array(
        z
          .strictObject({
            path: OutputPathSchema,
            required: z
              .boolean()
              .describe('true: the task fails (OUTPUT_MISSING) if the file is not there at the end.'),
          })
          .describe('One file to bring back.'),
      )
      .max(64)
      .refine((outputs) => new Set(outputs.map((o) => o.path)).size === outputs.length, {
        message: 'each output path may be declared once',
      })
      .default([])
      .describe(
        'Files to bring back, at most 64, each path once; only declared paths come back. Default none.',
      ),
    inputs: InputsSchema.optional().describe(
      'Files placed read-only in the task\'s directory (/task) before it starts, each {path, sha256, size}: upload them first with upload_inputs, which answers these fields. The revision digest covers them, so a reviewer approves exactly these bytes. Relative paths, not under "out/", no segment starting with "-", no control/bidi/zero-width characters. Files an interpreter loads on its own (__pycache__/, *.pyc, *.pth, sitecustomize.py, .local/) are an error finding (IMPLICIT_CODE).',
    ),
    mounts: z
      .array(MountNameSchema)
      .max(16)
      .refine((m) => new Set(m).size === m.length, { message: 'each mount may be named once' })
      .optional()
      .describe(
        'Named data sets the operator offers on workers (list_workers shows them), bound read-only at /mnt/<name>; at most 16, each once.',
      ),
    time_limit_seconds: z
      .number()
      .int()
      .min(1)
      .max(604800)
      .describe(
        "Hard stop in seconds, a whole number from 1 to 604800 and within the operator's limit: SIGTERM, a grace period, then SIGKILL (TIMED_OUT).",
      ),
    limits: SpecLimitsSchema.optional(),
    notes: z
      .string()
      .max(65536)
      .optional()
      .describe(
        'Anything the reviewer should know: why this run, what could go wrong; at most 65536 characters.',
      ),
  })
  .describe(
    'The whole task: exactly runtime.argv runs, with exactly runtime.env added; nothing is copied from your machine. Unknown fields are refused.',
  );

/** A parsed, validated task spec. */
export type TaskSpec = z.infer<typeof TaskSpecSchema>;
/** A task spec as a client may send it (defaults not yet applied). */
export type TaskSpecInput = z.input<typeof TaskSpecSchema>;
