import { z } from 'zod';
import { CardMigSchema, MAX_CARD_INDEX, MigModeSchema } from './sample.js';
import { DESTRUCTIVE, defineTool, EVERYONE, IdempotencyKeySchema, MUTATING, READ_ONLY } from './tool-def.js';
import { TaskViewSchema, TimeSchema } from './views.js';
import {
  ContainerEngineSchema,
  IsolationModeSchema,
  SlurmJobReportSchema,
  SlurmPoolSchema,
  WorkerBackendSchema,
} from './worker-protocol.js';

/** Tools to see the cluster (everyone) and to operate it (operators). docs/mcp-tools.md. */

const WorkerIdSchema = z.string().min(1).max(128).describe('The worker id, e.g. gpu-host-1');

/** Derived card states. */
export const CardStateSchema = z.enum([
  'AVAILABLE',
  'LEASED',
  'BUSY_FOREIGN',
  'UNHEALTHY',
  'CORDONED',
  'QUARANTINED',
  'UNKNOWN',
]);

/** A card as listed. `simulated: true` cards are not real GPUs. */
export const CardListingSchema = z.object({
  worker_id: z.string(),
  index: z.number().int(),
  uuid: z.string(),
  model: z.string(),
  state: CardStateSchema,
  reasons: z.array(z.string()),
  simulated: z.boolean(),
  memory_used_mib: z.number().nullable(),
  memory_total_mib: z.number().nullable(),
  utilization_pct: z.number().nullable(),
  temperature_c: z.number().nullable(),
  power_w: z.number().nullable(),
  health: z.string(),
  task_id: z.string().nullable(),
  lease_epoch: z.number().int().nullable(),
  cordon_reason: z.string().nullable(),
  /**
   * On a Slurm worker's pool slot held by a task: the Slurm job and where Slurm placed it (job id,
   * nodes and GPU indices; the slot is a count, the binding names the devices). Null otherwise.
   */
  slurm: SlurmJobReportSchema.nullable(),
  /** How people name it: `3`, or `0:mig:2/0` for a MIG slice (docs/decisions/0046-mig-slices-as-cards.md). */
  label: z.string().optional(),
  /** A whole card's MIG mode; `enabled`: only its slices are leased, never the card itself. */
  mig_mode: MigModeSchema.nullable().optional(),
  /** On a MIG slice: its parent card, instances, profile and compute slices; null on a whole card. */
  mig: CardMigSchema.nullable().optional(),
});

/** list_cards */
export const listCardsTool = defineTool({
  name: 'list_cards',
  title: 'List GPU cards',
  description:
    'Lists every card of every worker with its derived state (AVAILABLE, LEASED, BUSY_FOREIGN, UNHEALTHY, CORDONED, QUARANTINED, UNKNOWN), model, memory and whether it is simulated. A card in MIG mode is listed with its slices after it (label 0:mig:2/0, mig.profile); only the slices are leased, by cards.mig_profile or cards.allow_mig. Use it to size a spec (cards.count, cards.model).',
  roles: EVERYONE,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({ worker_id: WorkerIdSchema.optional() }),
  output: z.object({ cards: z.array(CardListingSchema), simulated_only: z.boolean() }),
});

/** get_queue */
export const getQueueTool = defineTool({
  name: 'get_queue',
  title: 'Show the queue',
  description:
    'Queued tasks in scheduling order with each one’s position and wait reason. Other owners’ tasks are anonymised.',
  roles: EVERYONE,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({}),
  output: z.object({
    tasks: z.array(
      z.object({
        position: z.number().int().nullable(),
        task_id: z.string().nullable(),
        own: z.boolean(),
        title: z.string().nullable(),
        cards: z.number().int(),
        priority: z.number().int(),
        approved_at: TimeSchema,
        reason: z.record(z.string(), z.unknown()).nullable(),
      }),
    ),
  }),
});

/** A worker as listed. */
export const WorkerListingSchema = z.object({
  worker_id: z.string(),
  hostname: z.string(),
  provider: z.enum(['nvidia', 'hy', 'sim']),
  simulated: z.boolean(),
  online: z.boolean(),
  draining: z.boolean(),
  cards: z.number().int(),
  sampler_error: z.string().nullable(),
  version: z.string(),
  last_seen_at: TimeSchema,
  offline_since: TimeSchema.nullable(),
  /** How it runs tasks, from its latest hello: `bwrap` (sandboxed) or `none`. */
  isolation: IsolationModeSchema,
  /** The engine for `container` tasks (podman or docker), or null when it cannot run them. */
  container_engine: ContainerEngineSchema.nullable(),
  /**
   * True when isolation is `none`: tasks there would see the whole host. Under
   * `policy.require_isolation` (the default) it gets no task.
   */
  unisolated: z.boolean(),
  /** `local` (tasks on this host) or `slurm` (tasks as Slurm jobs; its cards are a pool, ADR 0013). */
  backend: WorkerBackendSchema,
  /** A Slurm worker's partition and its nodes (name, GPUs, Slurm state); null on a local worker. */
  slurm: SlurmPoolSchema.nullable(),
  /**
   * The syscall filter its process tasks run under: `version` names the exact program, `allowed` the
   * groups of the filter's table its operator allowed again (`--seccomp-allow`); null: no filter.
   */
  seccomp: z.object({ version: z.string(), allowed: z.array(z.string()) }).nullable(),
  /**
   * Its host as its hello reports it (RAM, CPUs, the data dir's free disk at its start), with the memory
   * and task-dir disk its running tasks were given there and the CPUs they asked for; null: not known (a Slurm pool, an older worker). Task limits follow it.
   */
  host: z
    .object({
      memory_mib: z.number(),
      cpus: z.number(),
      disk_mib: z.number(),
      memory_committed_mib: z.number(),
      disk_committed_mib: z.number(),
      /** CPUs its running tasks asked for (`limits.cpus`). */
      cpus_committed: z.number(),
    })
    .nullable(),
});

/** list_workers */
export const listWorkersTool = defineTool({
  name: 'list_workers',
  title: 'List workers',
  description:
    'Lists GPU hosts: online, draining, provider (nvidia, hy, or sim for simulated cards), sampler errors, isolation (bwrap or none; unisolated workers get no task while policy.require_isolation holds), container engine, and backend (local, or slurm with its partition and nodes).',
  roles: EVERYONE,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({}),
  output: z.object({ workers: z.array(WorkerListingSchema) }),
});

const WorkerResult = z.object({ worker_id: z.string(), draining: z.boolean() });

/** drain_worker */
export const drainWorkerTool = defineTool({
  name: 'drain_worker',
  title: 'Drain a worker',
  description: 'Stops granting new tasks to a worker; running tasks finish. Reverse with undrain_worker.',
  roles: ['operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({ worker_id: WorkerIdSchema, idempotency_key: IdempotencyKeySchema }),
  output: WorkerResult,
});

/** undrain_worker */
export const undrainWorkerTool = defineTool({
  name: 'undrain_worker',
  title: 'Undrain a worker',
  description: 'Lets the scheduler grant tasks to a drained worker again.',
  roles: ['operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({ worker_id: WorkerIdSchema, idempotency_key: IdempotencyKeySchema }),
  output: WorkerResult,
});

const CardRef = {
  worker_id: WorkerIdSchema,
  index: z
    .number()
    .int()
    .min(0)
    .max(MAX_CARD_INDEX)
    .describe('Card index on the worker (a MIG slice: 256 + parent·128 + gi·8 + ci, shown as 0:mig:2/0)'),
};
const CordonResult = z.object({
  worker_id: z.string(),
  index: z.number().int(),
  cordoned: z.boolean(),
  reason: z.string().nullable(),
});

/** remove_worker */
export const removeWorkerTool = defineTool({
  name: 'remove_worker',
  title: 'Forget a retired worker',
  description:
    'Removes an offline worker that holds no live lease and runs nothing, with its cordons, so it stops appearing in list_workers and alerts. Revoke its token too (gpu-broker token revoke), or it is enrolled again when it reconnects.',
  roles: ['operator'],
  mutating: true,
  annotations: DESTRUCTIVE,
  input: z.strictObject({ worker_id: WorkerIdSchema, idempotency_key: IdempotencyKeySchema }),
  output: z.object({ worker_id: z.string(), removed: z.boolean() }),
});

/** cordon_card */
export const cordonCardTool = defineTool({
  name: 'cordon_card',
  title: 'Cordon a card',
  description: 'Takes a card out of scheduling (a running task keeps it until it ends).',
  roles: ['operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({
    ...CardRef,
    reason: z
      .string()
      .max(1000)
      .optional()
      .describe('Why, for the audit log and list_cards; at most 1000 characters.'),
    idempotency_key: IdempotencyKeySchema,
  }),
  output: CordonResult,
});

/** uncordon_card */
export const uncordonCardTool = defineTool({
  name: 'uncordon_card',
  title: 'Uncordon a card',
  description: 'Returns a cordoned card to scheduling.',
  roles: ['operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({ ...CardRef, idempotency_key: IdempotencyKeySchema }),
  output: CordonResult,
});

/** reconcile_task */
export const reconcileTaskTool = defineTool({
  name: 'reconcile_task',
  title: 'Reconcile a task',
  description:
    'Operator decision for a task whose fate is unknown (RECONCILIATION_REQUIRED) or whose lease is QUARANTINED: records the outcome and releases its cards after you checked them. Audited. Refused (INVALID_STATE) while the worker is online and still runs the execution, unless force.',
  roles: ['operator'],
  mutating: true,
  annotations: DESTRUCTIVE,
  input: z.strictObject({
    task_id: z.string().min(1).max(128).describe('The task id, e.g. task_01J…'),
    resolution: z
      .enum(['COMPLETED', 'FAILED', 'CANCELLED'])
      .describe('The outcome to record if the task is still undecided.'),
    reason: z
      .string()
      .min(1)
      .max(2000)
      .describe('What you checked (e.g. "host rebooted, cards idle in nvidia-smi").'),
    force: z
      .boolean()
      .default(false)
      .describe(
        'Reconcile even though the worker is online and still runs the execution: it is killed (cancel: SIGTERM, then SIGKILL) and its cards freed. Without it, such a task is refused with INVALID_STATE naming what would be killed.',
      ),
    idempotency_key: IdempotencyKeySchema,
  }),
  output: z.object({ task: TaskViewSchema, lease_released: z.boolean() }),
});

/** An alert an operator should act on. */
export const AlertSchema = z.object({
  kind: z.enum([
    'card_quarantined',
    'leased_card_missing',
    'sampler_error',
    'worker_offline',
    'task_needs_reconciliation',
    'audit_chain_broken',
    'worker_unisolated',
    'grant_failing',
    'standing_grant_budget',
    'disk_low',
    'disk_full',
  ]),
  severity: z.enum(['warning', 'critical']),
  subject: z.string(),
  message: z.string(),
  action: z.string(),
});

/** One account's standing in get_status `accounts` (operators). */
/** The budget period's fields an account's standing has, account-wide and per card model. */
const periodStanding = {
  period: z.enum(['day', 'week', 'month', '7d']),
  period_start: z.string(),
  usage_card_hours: z.number(),
  budget_card_hours: z.number().nullable(),
  budget_left_card_hours: z.number().nullable(),
  budget_resets_at: z.string().nullable(),
};

/** Where an account stands against one of its quotas per card model (ADR 0048). */
const ModelStandingSchema = z.object({
  model: z.string(),
  /** Cards of the model its subtree holds now. */
  held_cards: z.number().int(),
  nominal_cards: z.number().int().nullable(),
  /** nominal + borrowing limit; null: no limit. */
  limit_cards: z.number().int().nullable(),
  ...periodStanding,
});

const AccountStandingSchema = z.object({
  account: z.string(),
  parent: z.string().nullable(),
  share: z.number(),
  share_cards: z.number(),
  held_cards: z.number().int(),
  nominal_cards: z.number().int().nullable(),
  limit_cards: z.number().int().nullable(),
  ...periodStanding,
  queued: z.number().int(),
  first_wait: z
    .object({
      task_id: z.string().nullable(),
      position: z.number().int().nullable(),
      code: z.string(),
      message: z.string(),
    })
    .nullable(),
  /** Its quotas per card model and where it stands against each. */
  model_quotas: z.array(ModelStandingSchema),
});

/** get_status */
export const getStatusTool = defineTool({
  name: 'get_status',
  title: 'Cluster status and alerts',
  description:
    'Live leases, task counts by state, and alerts: quarantined cards, sampler errors, offline workers, UNISOLATED workers (tasks not sandboxed), tasks needing reconciliation, a broken audit chain. `you`: your account, its share of the pool, the cards it holds, its card-hours this period and budget left (account-wide and per card model), and where your first queued task stands and why it waits, also in words. Operators and viewers also get `accounts`: the same for every account.',
  roles: EVERYONE,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({}),
  output: z.object({
    tasks_by_state: z.record(z.string(), z.number().int()),
    leases: z.array(
      z.object({
        lease_id: z.string(),
        task_id: z.string().nullable(),
        worker_id: z.string(),
        cards: z.array(z.number().int()),
        lease_epoch: z.number().int(),
        state: z.enum(['ACTIVE', 'RELEASING', 'RELEASED', 'QUARANTINED']),
        reason: z.string().nullable(),
      }),
    ),
    alerts: z.array(AlertSchema),
    /**
     * Where the caller stands: its account, the account's normalised share of the pool (and in cards),
     * the cards its subtree holds now (`your_cards`: the caller's own), the card-hours charged to it over
     * the last 7 days, its quota, its card-hours this period (its budget's, else 7 days) and budget left,
     * its queued tasks, the caller's first queued task with its place in the account's queue and why it
     * waits, and all of that in `words`.
     */
    you: z.object({
      principal: z.string(),
      account: z.string(),
      share: z.number(),
      share_cards: z.number(),
      held_cards: z.number().int(),
      card_hours_7d: z.number(),
      your_cards: z.number().int(),
      nominal_cards: z.number().int().nullable(),
      limit_cards: z.number().int().nullable(),
      period: z.enum(['day', 'week', 'month', '7d']),
      usage_card_hours: z.number(),
      budget_left_card_hours: z.number().nullable(),
      budget_resets_at: z.string().nullable(),
      /** Its account's quotas per card model and where it stands against each (ADR 0048). */
      model_quotas: z.array(ModelStandingSchema),
      queued: z.number().int(),
      your_first_queued: z
        .object({
          task_id: z.string(),
          position_in_account: z.number().int().nullable(),
          code: z.string(),
          message: z.string(),
        })
        .nullable(),
      words: z.string(),
    }),
    /** Operators and viewers only: every account's standing (src/broker/tools/account-standing.ts). */
    accounts: z.array(AccountStandingSchema).optional(),
  }),
});
