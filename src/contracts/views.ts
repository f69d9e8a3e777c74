import { z } from 'zod';
import { ResolvedLimitsSchema } from './task-limits.js';
import { TaskSpecSchema } from './task-spec.js';
import { SlurmJobReportSchema } from './worker-protocol.js';

/**
 * What the broker returns: the views shared by MCP structured results and REST bodies. Field names are
 * the domain's, snake_case; times are ISO-8601 strings; unknown values are null, never omitted.
 */

/** ISO-8601 time. */
export const TimeSchema = z.string();
const NullableTime = TimeSchema.nullable();

/** A policy finding. */
export const FindingSchema = z.object({
  severity: z.enum(['error', 'warning']),
  code: z.string(),
  path: z.string(),
  message: z.string(),
  hint: z.string(),
});

/**
 * How a spec will run, spelled out for the reviewer so it needs no reading of defaults: the runtime
 * kind, the container image (null for a host process) and the network (`none` when the spec omits it).
 */
export const SandboxSummarySchema = z.object({
  runtime: z.enum(['process', 'container']),
  image: z.string().nullable(),
  network: z.enum(['none', 'host']),
  /**
   * The resource limits the task runs with (the spec's asks, else the policy's per-card defaults); on a
   * worker whose host is smaller, its memory and disk defaults are lowered to that host's share per card.
   */
  limits: ResolvedLimitsSchema,
});
/** How a spec will run, for the reviewer. */
export type SandboxSummary = z.infer<typeof SandboxSummarySchema>;

/** The proposal states. */
export const ProposalStateSchema = z.enum([
  'DRAFT',
  'IN_REVIEW',
  'CHANGES_REQUESTED',
  'APPROVED',
  'REJECTED',
  'CANCELLED',
  'EXPIRED',
]);

/** The task states. */
export const TaskStateSchema = z.enum([
  'QUEUED',
  'ASSIGNED',
  'RUNNING',
  'FINALIZING',
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'RECONCILIATION_REQUIRED',
]);

/** Review decisions. */
export const ReviewDecisionSchema = z.enum(['APPROVE', 'REQUEST_CHANGES', 'REJECT']);

/** A review as shown to the proposal's owner and to reviewers. */
export const ReviewViewSchema = z.object({
  review_id: z.string(),
  revision_id: z.string(),
  revision_digest: z.string(),
  reviewer: z.string(),
  decision: ReviewDecisionSchema,
  comments: z.string(),
  created_at: TimeSchema,
  /** Set when a standing grant approved the revision (`reviewer` is then the grant's decider). */
  grant_id: z.string().nullable().optional(),
});

/** A revision's identity and policy result. */
export const RevisionSummarySchema = z.object({
  revision_id: z.string(),
  number: z.number().int(),
  digest: z.string(),
  confirmed: z.boolean(),
  findings: z.array(FindingSchema),
  confirmable: z.boolean(),
});

/** A proposal with its current revision's spec. */
export const ProposalViewSchema = z.object({
  proposal_id: z.string(),
  state: ProposalStateSchema,
  title: z.string(),
  owner: z.string(),
  current_revision: RevisionSummarySchema,
  revision_count: z.number().int(),
  spec: TaskSpecSchema,
  task_id: z.string().nullable(),
  reviews: z.array(ReviewViewSchema),
  created_at: TimeSchema,
  updated_at: TimeSchema,
  expires_at: NullableTime,
  next_action: z.string(),
});
/** A proposal view. */
export type ProposalView = z.infer<typeof ProposalViewSchema>;

/** One line of a proposal listing. */
export const ProposalSummarySchema = z.object({
  proposal_id: z.string(),
  state: ProposalStateSchema,
  title: z.string(),
  owner: z.string(),
  revision_number: z.number().int(),
  task_id: z.string().nullable(),
  updated_at: TimeSchema,
});
/** A proposal summary. */
export type ProposalSummary = z.infer<typeof ProposalSummarySchema>;

/**
 * A card bound to a task's lease. `label` is how people name it: the index of a whole card, or the MIG
 * slice it is, `0:mig:2/0` (card 0, GPU instance 2, compute instance 0; ADR 0046). Older masters omit it.
 */
export const TaskCardSchema = z.object({
  index: z.number().int(),
  uuid: z.string(),
  label: z.string().optional(),
});

/**
 * A task. `reason` and `position` are set while it waits; `failure_reason` once it failed. `reason` also
 * says what happened to a task's worker: `worker_unreachable` while the task is RECONCILIATION_REQUIRED
 * because its worker fell silent, `worker_returned` once the worker came back with the task alive (with
 * `unreachable_seconds` and a `message` such as "worker w1 was unreachable for 120 s; the task kept
 * running").
 */
export const TaskViewSchema = z.object({
  task_id: z.string(),
  proposal_id: z.string(),
  revision_id: z.string(),
  spec_digest: z.string(),
  title: z.string(),
  owner: z.string(),
  state: TaskStateSchema,
  desired: z.enum(['run', 'cancel']),
  reason: z.record(z.string(), z.unknown()).nullable(),
  position: z.number().int().nullable(),
  failure_reason: z.string().nullable(),
  /** What the worker said about a failure, e.g. which input failed verification (SETUP_FAILED). */
  failure_detail: z.string().nullable(),
  exit_code: z.number().int().nullable(),
  signal: z.string().nullable(),
  worker_id: z.string().nullable(),
  lease_epoch: z.number().int().nullable(),
  cards: z.array(TaskCardSchema),
  simulated: z.boolean().nullable(),
  /**
   * On a Slurm worker: the job behind the task — job id, Slurm's state, Slurm's own pending reason
   * while it waits in Slurm after the broker admitted it, and the binding (nodes, GPU indices) once it
   * started. Null on a local worker or before submission.
   */
  slurm: SlurmJobReportSchema.nullable(),
  /**
   * How often the scheduler preempted this task to reclaim cards for an account within its nominal share
   * (docs/operations.md "Borrowing and reclaim"); each time it was queued again at its old place.
   */
  preemptions: z.number().int(),
  created_at: TimeSchema,
  approved_at: TimeSchema,
  started_at: NullableTime,
  finished_at: NullableTime,
  next_action: z.string(),
});
/** A task view. */
export type TaskView = z.infer<typeof TaskViewSchema>;

/** One line of a task listing. */
export const TaskSummarySchema = z.object({
  task_id: z.string(),
  title: z.string(),
  owner: z.string(),
  state: TaskStateSchema,
  failure_reason: z.string().nullable(),
  position: z.number().int().nullable(),
  /** As in the task view: why it waits, or what happened to its worker (`worker_unreachable`, `worker_returned`). */
  reason: z.record(z.string(), z.unknown()).nullable(),
  updated_at: TimeSchema,
});
/** A task summary. */
export type TaskSummary = z.infer<typeof TaskSummarySchema>;
