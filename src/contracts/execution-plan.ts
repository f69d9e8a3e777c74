import { z } from 'zod';
import { ResolvedLimitsSchema } from './task-limits.js';
import { TaskSpecSchema } from './task-spec.js';

/**
 * What the master hands a worker to run (docs/worker-protocol.md, `assign`): the execution plan, and the
 * vocabulary of an execution's outcome (phases, failure reasons, output records). Part of the worker
 * protocol; src/contracts/worker-protocol.ts re-exports it, so consumers keep one import path.
 */

/** An id on the wire (execution, task, assignment, boot). */
export const ProtocolIdSchema = z.string().min(1).max(128);
const Id = ProtocolIdSchema;

/** Largest single output file a worker uploads, in bytes. */
export const MAX_OUTPUT_FILE_BYTES = 8 * 1024 * 1024;

/** Largest exit code or status a worker reports (a 32-bit int). */
export const ExitCodeSchema = z
  .number()
  .int()
  .min(-(2 ** 31))
  .max(2 ** 31 - 1);

/** Why an execution failed. */
export const FailureReasonSchema = z.enum([
  'EXIT_NONZERO',
  'KILLED_BY_SIGNAL',
  'TIMED_OUT',
  'OOM_KILLED',
  'OUT_OF_MEMORY',
  'DISK_LIMIT',
  'SETUP_FAILED',
  'OUTPUT_MISSING',
  'WORKER_LOST',
  'CLEANUP_UNCONFIRMED',
  'STALE_EPOCH',
  'CANCELLED',
  'PREEMPTED',
  /** A leased card (or MIG slice) left the worker's samples under the run; the worker stopped it (ADR 0046 §7). */
  'CARD_LOST',
]);
/** Why an execution failed. */
export type FailureReason = z.infer<typeof FailureReasonSchema>;

/** A card bound to a lease: its index on the worker and its uuid as sampled. */
export const LeasedCardSchema = z.object({ index: z.number().int().min(0), uuid: z.string().min(1) });
/** A card bound to a lease. */
export type LeasedCard = z.infer<typeof LeasedCardSchema>;

/** Everything a worker needs to run one execution; nothing else is shared with the master. */
export const ExecutionPlanSchema = z.object({
  task_id: Id,
  execution_id: Id,
  assignment_id: Id,
  lease_epoch: z.number().int().min(1),
  cards: z.array(LeasedCardSchema).min(1).max(64),
  spec: TaskSpecSchema,
  spec_digest: z.string().regex(/^[0-9a-f]{64}$/),
  kill_grace_seconds: z.number().min(0).max(600),
  cleanup_timeout_seconds: z.number().min(0).max(3600),
  /**
   * VRAM use (percent of total) under which a leased card counts as clean for the cleanup receipt: the
   * master's `scheduling.vram_threshold_pct`, so a card is released only if it would be eligible again.
   * Default 2 when absent.
   */
  vram_clean_pct: z.number().min(0).max(100).optional(),
  /**
   * Files the policy pins by sha256 (the executable, or an interpreter's script). The worker hashes
   * them on its own host before running and rejects the plan (SETUP_FAILED) on any mismatch: the
   * master checked its copy, but what runs is the worker's.
   */
  pins: z
    .array(z.object({ path: z.string().min(1).max(4096), sha256: z.string().regex(/^[0-9a-f]{64}$/) }))
    .max(16)
    .optional(),
  /**
   * For a `container` task whose image the policy allows by reference with a digest: the digest
   * (`sha256:…`) the worker's local image must have, checked before it runs.
   */
  image_digest: z
    .string()
    .regex(/^sha256:[0-9a-f]{64}$/)
    .optional(),
  /** The policy's `hidden_paths`: host paths the sandbox hides from the task, besides its own list. */
  hidden_paths: z.array(z.string().min(1).max(4096)).max(256).optional(),
  /**
   * The argv to exec, computed by the master from the approved spec and policy (src/domain/policy/run-argv.ts:
   * e.g. Python's isolated-mode flags before a script from the inputs); absent = spec.runtime.argv.
   */
  argv: z.array(z.string().max(8192)).min(1).max(1040).optional(),
  /**
   * The task's resource limits, resolved by the master from the spec and the policy
   * (src/domain/policy/task-limits.ts); the worker enforces them and reports what it enforced in the exit's
   * `detail`. Absent (an older master): the worker applies no limit.
   */
  limits: ResolvedLimitsSchema.optional(),
  /**
   * How often this task was preempted before this run (docs/operations.md "Borrowing and reclaim"): above
   * 0 the task gets GPU_BROKER_PREEMPTED=1 and GPU_BROKER_PREEMPTIONS=<n>, to resume from its checkpoint.
   * Absent: never.
   */
  preemptions: z.number().int().min(0).max(1000).optional(),
  /**
   * The CPUs the task asked for (its spec's `limits.cpus`), enforced as a quota (cgroup `cpu.max`, podman
   * `--cpus`); absent: no cap. Beside `limits`, not in it: an older worker refuses unknown keys there.
   */
  cpus: z.number().int().min(1).max(65536).optional(),
  /**
   * A backfilled task's deadline (docs/decisions/0049-backfill-into-reservations.md): counted from when the
   * executor begins (its setup, inputs and image included), the run is stopped TIMED_OUT after this many
   * seconds at the latest, however much of its own time limit is left. The master promised the cards an
   * aged task holds back by then: its time limit plus a start-up allowance. Absent: only the time limit
   * (counted from the start) applies. An older worker ignores it.
   */
  stop_within_seconds: z
    .number()
    .int()
    .min(1)
    .max(10 * 86400)
    .optional(),
});
/** Everything a worker needs to run one execution. */
export type ExecutionPlan = z.infer<typeof ExecutionPlanSchema>;

/** An output file as recorded after upload. */
export const OutputRecordSchema = z.object({
  path: z.string().min(1).max(512),
  size: z.number().int().min(0).max(MAX_OUTPUT_FILE_BYTES),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
/** An output file as recorded after upload. */
export type OutputRecord = z.infer<typeof OutputRecordSchema>;

/** Phases an execution reports, in order; `rejected` and `cleanup_failed` are terminal failures. */
export const ExecutionPhaseSchema = z.enum([
  'accepted',
  'rejected',
  'started',
  'exited',
  'cleaned',
  'cleanup_failed',
]);
/** An execution phase. */
export type ExecutionPhase = z.infer<typeof ExecutionPhaseSchema>;
