import { z } from 'zod';
import { DESTRUCTIVE, defineTool, IdempotencyKeySchema, PageInput, READ_ONLY } from './tool-def.js';
import { TimeSchema } from './views.js';

/** Tools to qualify a GPU host end to end (docs/qualification.md). Operators only. */

/** The ladder a run uses when none is given. */
export const DEFAULT_LADDER = [1, 2, 4, 8] as const;

/** Who plays the submitter: the built-in MCP client, or a real coding-agent CLI driven by a prompt. */
export const SubmitterKindSchema = z.enum(['scripted', 'claude', 'codex']);

/**
 * Run states:
 *  - RUNNING: the ladder is being driven; the run's cards are reserved for its own tasks;
 *  - PASSED: every rung and post-condition checked out; the cards went back to the pool;
 *  - FAILED: a check failed (the evidence names it); the cards stay cordoned until uncordoned;
 *  - INCONCLUSIVE: nothing failed but some requested counts could not run; the cards stay cordoned;
 *  - CANCELLED: stopped before it could be judged (master shut down or restarted); no evidence.
 */
export const QualificationRunStateSchema = z.enum([
  'RUNNING',
  'PASSED',
  'FAILED',
  'INCONCLUSIVE',
  'CANCELLED',
]);

/** A verdict of the evidence document. */
export const VerdictSchema = z.enum(['PASSED', 'FAILED', 'INCONCLUSIVE']);

/** One progress line of a run. */
export const QualificationStepSchema = z.object({
  seq: z.number().int(),
  at: TimeSchema,
  /** Milliseconds since the run started. */
  elapsed_ms: z.number().int(),
  /** The rung (card count) the step belongs to, or null for run-level steps. */
  cards: z.number().int().nullable(),
  text: z.string(),
});

/** A run as the tools return it. `evidence` is the canonical evidence document once judged. */
export const QualificationRunViewSchema = z.object({
  run_id: z.string(),
  state: QualificationRunStateSchema,
  worker_id: z.string(),
  submitter: SubmitterKindSchema,
  submitter_principal: z.string(),
  reviewer_principal: z.string(),
  requested: z.array(z.number().int()),
  ladder: z.array(z.number().int()),
  /**
   * The single-card rungs on MIG slices (GEMM only; all_reduce is not offered across MIG instances), one
   * per distinct profile, run before the ladder: the slice (`0:mig:2/0`) and its profile (null when the
   * worker no longer reports the slice).
   */
  slices: z.array(z.object({ card: z.string(), profile: z.string().nullable() })),
  /** A Slurm pool's two-node rung (`cards` as `per_node` on each of two nodes), run after the ladder. */
  span: z.object({ cards: z.number().int(), per_node: z.number().int() }).nullable(),
  skipped: z.array(z.object({ cards: z.number().int(), reason: z.string() })),
  reserved_cards: z.array(z.number().int()),
  steps: z.array(QualificationStepSchema),
  verdict: VerdictSchema.nullable(),
  digest: z.string().nullable(),
  evidence: z.record(z.string(), z.unknown()).nullable(),
  detail: z.string().nullable(),
  created_at: TimeSchema,
  finished_at: TimeSchema.nullable(),
  next_action: z.string(),
});
/** A run view. */
export type QualificationRunView = z.infer<typeof QualificationRunViewSchema>;

/** start_qualification */
export const startQualificationTool = defineTool({
  name: 'start_qualification',
  title: 'Qualify a GPU host',
  description:
    'Starts a qualification run on one worker: it cordons the cards it needs, then for each card count of the ladder (default 1, 2, 4, 8) a submitter principal proposes the bundled workload (NCCL all_reduce + GEMM), a distinct reviewer principal approves it, the scheduler leases the cards and the worker runs it; a verifier then checks every id, number and post-condition from the master’s own records. Returns at once with run_id; follow it with get_qualification_run. Counts larger than the worker has are skipped, which makes the verdict INCONCLUSIVE. On a Slurm pool worker the pool must be idle and is held whole; the ladder stops at the largest node and, with two nodes or more, adds one two-node rung. A card in MIG mode is never tested whole: one slice per profile gets a GEMM-only single-card rung (all_reduce is not offered across MIG instances). Cards return to the pool only on PASSED.',
  roles: ['operator'],
  mutating: true,
  annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: true },
  input: z.strictObject({
    worker_id: z.string().min(1).max(128).describe('The worker to qualify, e.g. gpu-host-1'),
    cards: z
      .array(z.number().int().min(1).max(64))
      .min(1)
      .max(16)
      .optional()
      .describe('Card counts to run, e.g. [1, 2, 4, 8] (the default).'),
    submitter: SubmitterKindSchema.optional().describe(
      'scripted (default): the built-in MCP client; claude / codex: launch that CLI non-interactively with the client kit’s MCP configuration.',
    ),
    idempotency_key: IdempotencyKeySchema,
  }),
  output: QualificationRunViewSchema,
});

/** get_qualification_run */
export const getQualificationRunTool = defineTool({
  name: 'get_qualification_run',
  title: 'Read a qualification run',
  description:
    'Returns a qualification run: state, progress steps, and once judged the verdict, the evidence document and its sha256 digest.',
  roles: ['operator'],
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({ run_id: z.string().min(1).max(128).describe('The run id, e.g. qrun_01J…') }),
  output: QualificationRunViewSchema,
});

/** list_qualification_runs */
export const listQualificationRunsTool = defineTool({
  name: 'list_qualification_runs',
  title: 'List qualification runs',
  description:
    'Qualification runs newest first, with state, verdict and evidence digest (get_qualification_run has the evidence).',
  roles: ['operator'],
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({ ...PageInput }),
  output: z.object({
    runs: z.array(
      z.object({
        run_id: z.string(),
        state: QualificationRunStateSchema,
        worker_id: z.string(),
        submitter: SubmitterKindSchema,
        ladder: z.array(z.number().int()),
        verdict: VerdictSchema.nullable(),
        digest: z.string().nullable(),
        created_at: TimeSchema,
        finished_at: TimeSchema.nullable(),
      }),
    ),
    next_cursor: z.string().nullable(),
  }),
});

/** cancel_qualification */
export const cancelQualificationTool = defineTool({
  name: 'cancel_qualification',
  title: 'Cancel a qualification run',
  description:
    'Stops a RUNNING qualification run: it ends CANCELLED without evidence, and its cards stay cordoned until an operator uncordons them.',
  roles: ['operator'],
  mutating: true,
  annotations: DESTRUCTIVE,
  input: z.strictObject({
    run_id: z.string().min(1).max(128).describe('The run id, e.g. qrun_01J…'),
    idempotency_key: IdempotencyKeySchema,
  }),
  output: QualificationRunViewSchema,
});
