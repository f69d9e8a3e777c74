import { z } from 'zod';
import { ERROR_CODES } from './errors.js';
import {
  ExecutionPhaseSchema,
  ExecutionPlanSchema,
  ExitCodeSchema,
  FailureReasonSchema,
  MAX_OUTPUT_FILE_BYTES,
  OutputRecordSchema,
  ProtocolIdSchema,
} from './execution-plan.js';
import { CardSampleSchema, MAX_CARD_INDEX, ProviderSchema } from './sample.js';
import { SlurmJobReportSchema, SlurmPoolSchema } from './slurm-report.js';
import { HostResourcesSchema } from './task-limits.js';
import { MountNameSchema } from './task-spec.js';

/**
 * The worker protocol (docs/worker-protocol.md): JSON messages over WSS, one zod
 * discriminated union per direction on `type`.
 *
 * Sequencing: every message except `hello`, `welcome`, `ack` and `error` carries `seq`, numbered per
 * sender boot (`boot_id`). The receiver processes a message only if its seq is above the highest it has
 * processed for that boot id, acknowledges it either way, and drops duplicates. The sender keeps
 * unacknowledged messages (worker: its SQLite outbox; master: its outbox table) and resends them, in
 * order, after reconnecting.
 */

// The plan and the Slurm reports have files of their own; re-exported so every consumer of the
// protocol keeps this one import path.
export {
  type ExecutionPhase,
  type ExecutionPlan,
  ExecutionPlanSchema,
  type FailureReason,
  type LeasedCard,
  MAX_OUTPUT_FILE_BYTES,
  type OutputRecord,
} from './execution-plan.js';
export {
  type SlurmBinding,
  type SlurmJobReport,
  SlurmJobReportSchema,
  type SlurmPool,
  SlurmPoolSchema,
} from './slurm-report.js';

/** Version of this protocol. A peer speaking another version is refused at `hello`. */
export const PROTOCOL_VERSION = 2;

/** Largest log chunk a worker sends in one message, in bytes. */
export const MAX_LOG_CHUNK_BYTES = 64 * 1024;
/**
 * Most log bytes (stdout and stderr together) kept per task: the master's default
 * `storage.max_log_bytes_per_task`, and what a worker keeps on its disk and queues for the master.
 */
export const DEFAULT_MAX_LOG_BYTES_PER_TASK = 64 * 1024 * 1024;

/**
 * The one line a worker writes into a stream's log file (and sends) where that stream's output first went
 * past the task's cap of `cap` bytes; what follows it is dropped.
 */
export function logTruncatedMarker(cap: number): string {
  return `\n[gpu-broker: log truncated at ${cap} bytes (stdout and stderr together); further output dropped]\n`;
}

/** Largest WebSocket message either side accepts (base64 of the largest output plus framing). */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/**
 * Most executions one `hello` lists: every unfinished one first, then the most recent finished ones.
 * A shorter list is complete, so the master may conclude that an execution it does not name is unknown.
 */
export const HELLO_MAX_EXECUTIONS = 1024;

const Id = ProtocolIdSchema;

/**
 * The one rule for a worker id (docs/state-machines.md), enforced where a worker token is created
 * (`token create`, `start`), where a worker starts (`worker --id`) and at `hello`: a token bound to an
 * id that hello refuses could never connect. Ids are names in paths, logs and terminals, so no control
 * characters, no `/`, nothing a shell would mangle.
 */
export const WORKER_ID_RULE =
  'a worker id is 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit';
/** A worker id; see WORKER_ID_RULE. */
export const WorkerIdSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, WORKER_ID_RULE);

/**
 * Highest lease epoch a worker may claim to have seen (hello `card_epochs`). Epochs count leases one by
 * one, so no real worker comes near it; a claim above would push the master's next epoch past what a
 * plan can carry (docs/state-machines.md).
 */
export const MAX_LEASE_EPOCH = 2 ** 48;

/**
 * Most cards one hello or sample carries: 8 cards split into 7 MIG slices each are 64 cards plus their
 * 8 parents (ADR 0046); older masters took 64, which a host without MIG never exceeds.
 */
export const MAX_SAMPLE_CARDS = 128;

/** What a worker still knows about an execution when it says hello. */
export const KnownExecutionSchema = z.object({
  execution_id: Id,
  task_id: Id,
  lease_epoch: z.number().int().min(1),
  phase: ExecutionPhaseSchema,
  /** The card indexes of its plan (the master treats an unfinished execution's cards as held). */
  cards: z.array(z.number().int().min(0).max(MAX_CARD_INDEX)).max(64).default([]),
});

const Sequenced = {
  protocol_version: z.literal(PROTOCOL_VERSION),
  boot_id: Id,
  seq: z.number().int().min(1),
};

/**
 * How a worker isolates the tasks it runs: `bwrap` (every task in its own bubblewrap sandbox) or
 * `none` (`--isolation none`: tasks run as plain processes; the master marks the worker UNISOLATED and,
 * under `policy.require_isolation`, places no task on it).
 */
export const IsolationModeSchema = z.enum(['bwrap', 'none']);
/** How a worker isolates the tasks it runs. */
export type IsolationMode = z.infer<typeof IsolationModeSchema>;

/** The container engine a worker runs `container` tasks with; null when it has none. */
export const ContainerEngineSchema = z.enum(['podman', 'docker']);
/** The container engine a worker runs `container` tasks with. */
export type ContainerEngine = z.infer<typeof ContainerEngineSchema>;

/** A named data mount a worker offers (its operator's `--mount NAME=PATH[:rw]`); the path stays local. */
export const WorkerMountSchema = z.object({ name: MountNameSchema, read_only: z.boolean() });
/** A named data mount a worker offers. */
export type WorkerMount = z.infer<typeof WorkerMountSchema>;

/** How a worker runs tasks: `local` (on its own host) or `slurm` (through sbatch on a Slurm cluster). */
export const WorkerBackendSchema = z.enum(['local', 'slurm']);
/** How a worker runs tasks. */
export type WorkerBackend = z.infer<typeof WorkerBackendSchema>;

/** worker → master: opens a session. */
export const HelloSchema = z.object({
  type: z.literal('hello'),
  protocol_version: z.number().int(),
  worker_id: WorkerIdSchema,
  boot_id: Id,
  version: z.string().max(64),
  hostname: z.string().max(255),
  provider: ProviderSchema,
  cards: z.array(CardSampleSchema).max(MAX_SAMPLE_CARDS),
  executions: z.array(KnownExecutionSchema).max(HELLO_MAX_EXECUTIONS),
  /** Highest master seq this worker has processed, per master boot id, so the master resends the rest. */
  master_marks: z.array(z.object({ boot_id: Id, seq: z.number().int().min(0) })).max(16),
  /**
   * The highest lease epoch this worker has seen per card. A master restored from a backup learns them
   * here and issues only higher epochs, so it cannot hand out an epoch a running execution already holds
   * (docs/state-machines.md).
   */
  card_epochs: z
    .array(
      z.object({
        index: z.number().int().min(0).max(MAX_CARD_INDEX),
        epoch: z.number().int().min(0).max(MAX_LEASE_EPOCH),
      }),
    )
    .max(1024)
    .default([]),
  /** How this worker isolates tasks; a worker that does not say is taken as unisolated. */
  isolation: IsolationModeSchema.default('none'),
  /** The engine for `container` tasks, or null when this worker cannot run them. */
  container_engine: ContainerEngineSchema.nullable().default(null),
  /** The named data mounts tasks may ask for here (spec `mounts`). */
  mounts: z.array(WorkerMountSchema).max(64).default([]),
  /** How it runs tasks; older workers do not say and are local. */
  backend: WorkerBackendSchema.default('local'),
  /** A Slurm worker's partition and nodes; null on a local worker. */
  slurm: SlurmPoolSchema.nullable().default(null),
  /**
   * The syscall filter its process tasks run under (worker/sandbox/seccomp.ts): the version names the
   * exact program, `allowed` the table's groups the operator allowed again; null: none (unsandboxed, or
   * a host the table has no numbers for). Older workers do not say: null.
   */
  seccomp: z
    .object({
      version: z.string().regex(/^v[0-9]+-[0-9a-f]{12}$/),
      allowed: z.array(z.string().regex(/^[a-z_]{1,32}$/)).max(32),
    })
    .nullable()
    .default(null),
  /**
   * Its host's RAM, CPUs and the size of the file system holding its data dir (docs/security.md "The task sandbox"): the
   * master derives each task's default and largest memory and disk from them. null: not known (older
   * workers, a Slurm pool, whose nodes Slurm accounts for).
   */
  host: HostResourcesSchema.nullable().default(null),
  /**
   * True: this worker starts an accepted execution only once the master acknowledged its `accepted`
   * report (worker/executions/manager.ts), so while the master has not recorded the acceptance it may
   * withdraw the assign of a worker that fell silent and requeue the task elsewhere (docs/operations.md "Partitions").
   * Older workers do not say: the master never withdraws their assigns.
   */
  starts_after_ack: z.boolean().optional(),
});

/** worker → master: a sample of all cards, or why sampling failed. */
export const SampleMessageSchema = z.object({
  type: z.literal('sample'),
  ...Sequenced,
  sampled_at: z.number().int(),
  cards: z.array(CardSampleSchema).max(MAX_SAMPLE_CARDS),
  sampler_error: z.string().max(4096).nullable(),
  /**
   * Indexes of the cards this worker's unfinished executions hold right now. The master never grants
   * such a card, whatever its own records say (a restored master, a reconcile while the task still
   * ran): docs/state-machines.md.
   */
  held_cards: z.array(z.number().int().min(0).max(MAX_CARD_INDEX)).max(1024).default([]),
});

/** worker → master: an execution changed phase. */
export const ExecutionMessageSchema = z.object({
  type: z.literal('execution'),
  ...Sequenced,
  execution_id: Id,
  task_id: Id,
  lease_epoch: z.number().int().min(1),
  phase: ExecutionPhaseSchema,
  exit_code: ExitCodeSchema.nullable().optional(),
  signal: z.string().max(32).nullable().optional(),
  failure_reason: FailureReasonSchema.nullable().optional(),
  outputs: z.array(OutputRecordSchema).max(64).optional(),
  detail: z.string().max(4096).optional(),
  /**
   * Slurm workers only: the job behind the execution. A repeated `accepted` report that only carries a
   * newer `slurm` (the job's pending reason changed) updates it and is otherwise a duplicate.
   */
  slurm: SlurmJobReportSchema.optional(),
});

/** worker → master: a chunk of stdout or stderr at a byte offset. */
export const LogMessageSchema = z.object({
  type: z.literal('log'),
  ...Sequenced,
  execution_id: Id,
  stream: z.enum(['stdout', 'stderr']),
  /** Byte offset in the stream; the master refuses one beyond what it holds (no gaps). */
  offset: z.number().int().min(0),
  data: z.string().max(MAX_LOG_CHUNK_BYTES * 2),
});

/** worker → master: one declared output file's bytes. */
export const OutputMessageSchema = z.object({
  type: z.literal('output'),
  ...Sequenced,
  execution_id: Id,
  lease_epoch: z.number().int().min(1),
  path: z.string().min(1).max(512),
  size: z.number().int().min(0).max(MAX_OUTPUT_FILE_BYTES),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  content_base64: z.string(),
});

/** The distributed backend torch would use on a worker: nccl (CUDA/ROCm cards) or gloo (CPU). */
export const TorchBackendSchema = z.enum(['nccl', 'gloo']);
/** A distributed backend. */
export type TorchBackend = z.infer<typeof TorchBackendSchema>;

/**
 * worker → master: what the qualification interpreter the welcome named can do (docs/operations.md), so
 * that start_qualification refuses before cordoning anything on a host where the workload cannot run.
 * `torch_version` is null when `import torch` fails; `error` then says why (its last line).
 */
export const ProbeMessageSchema = z.object({
  type: z.literal('probe'),
  ...Sequenced,
  python: z.string().min(1).max(4096),
  torch_version: z.string().max(64).nullable(),
  backend: TorchBackendSchema.nullable(),
  error: z.string().max(4096).nullable(),
});
/** A probe report. */
export type ProbeMessage = z.infer<typeof ProbeMessageSchema>;

/** Either direction: acknowledges one sequenced message. */
export const AckSchema = z.object({ type: z.literal('ack'), boot_id: Id, seq: z.number().int().min(1) });

/**
 * The codes only the worker link uses, beside the broker's own (src/contracts/errors.ts, which a
 * refusal of a worker message carries: `BrokerError.code`):
 * - `INVALID_MESSAGE`: a frame that does not parse (either side; src/contracts/sequencing.ts);
 * - `INVALID_WORKER_ID`: a hello whose worker_id breaks the rule (master; then close 4002);
 * - `HELLO_REQUIRED`: a message before hello (master);
 * - `PROTOCOL_VERSION`: a hello in another protocol version (master; then close 4002);
 * - `UNKNOWN_EXECUTION`: a cancel or query naming an execution the worker does not know (worker).
 */
export const WORKER_LINK_ERROR_CODES = [
  'INVALID_MESSAGE',
  'INVALID_WORKER_ID',
  'HELLO_REQUIRED',
  'PROTOCOL_VERSION',
  'UNKNOWN_EXECUTION',
] as const;

/**
 * Every `code` an `error` message may carry, in either direction: a closed vocabulary (ADR 0020 step 2;
 * the strings are the ones both ends sent before it was closed). A code outside it makes the message
 * invalid (answered `INVALID_MESSAGE`, never acknowledged: `error` is not sequenced).
 */
export const WorkerErrorCodeSchema = z.enum([...ERROR_CODES, ...WORKER_LINK_ERROR_CODES]);
/** One code of an `error` message. */
export type WorkerErrorCode = z.infer<typeof WorkerErrorCodeSchema>;

/** Either direction: a message could not be processed. Never closes the connection by itself. */
export const ProtocolErrorSchema = z.object({
  type: z.literal('error'),
  code: WorkerErrorCodeSchema,
  message: z.string().max(4096),
  ref_seq: z.number().int().optional(),
});

/** Every message a worker may send. */
export const WorkerMessageSchema = z.discriminatedUnion('type', [
  HelloSchema,
  SampleMessageSchema,
  ExecutionMessageSchema,
  LogMessageSchema,
  OutputMessageSchema,
  ProbeMessageSchema,
  AckSchema,
  ProtocolErrorSchema,
]);
/** A message from a worker. */
export type WorkerMessage = z.infer<typeof WorkerMessageSchema>;

/** master → worker: the session is open. */
export const WelcomeSchema = z.object({
  type: z.literal('welcome'),
  protocol_version: z.literal(PROTOCOL_VERSION),
  worker_id: WorkerIdSchema,
  master_boot_id: Id,
  sample_interval_ms: z.number().int().min(100),
  /** Highest worker seq the master has processed, per worker boot id, so the worker resends the rest. */
  worker_marks: z.array(z.object({ boot_id: Id, seq: z.number().int().min(0) })).max(16),
  /**
   * The master's `qualification_python`: the worker probes it (imports torch, picks a backend) and
   * answers with a `probe` message. Absent from older masters: no probe.
   */
  qualification_python: z.string().startsWith('/').max(4096).optional(),
  /**
   * The master's `storage.max_log_bytes_per_task`: the worker keeps (on disk, and queued for the master)
   * at most this much of each task's log it starts from now on, with one marker line past it. Absent
   * from older masters: DEFAULT_MAX_LOG_BYTES_PER_TASK.
   */
  max_log_bytes_per_task: z.number().int().min(1024).optional(),
});

/** master → worker: run this plan. */
export const AssignSchema = z.object({ type: z.literal('assign'), ...Sequenced, plan: ExecutionPlanSchema });

/** master → worker: stop this execution (SIGTERM, grace, SIGKILL). */
export const CancelSchema = z.object({
  type: z.literal('cancel'),
  ...Sequenced,
  execution_id: Id,
  lease_epoch: z.number().int().min(1),
  reason: z.string().max(1024),
  /**
   * The scheduler reclaims the cards (docs/operations.md "Borrowing and reclaim"): SIGTERM, the spec's
   * `preemption_grace_seconds` (else the plan's kill grace), SIGKILL, and the exit is reported with
   * failure_reason PREEMPTED. Absent: a cancel. An older worker ignores it and reports CANCELLED, which
   * the master reads as PREEMPTED for a lease it asked to preempt.
   */
  preempt: z.boolean().optional(),
});

/** master → worker: report what you know about this execution. */
export const QuerySchema = z.object({ type: z.literal('query'), ...Sequenced, execution_id: Id });

/** Every message the master may send. */
export const MasterMessageSchema = z.discriminatedUnion('type', [
  WelcomeSchema,
  AssignSchema,
  CancelSchema,
  QuerySchema,
  AckSchema,
  ProtocolErrorSchema,
]);
/** A message from the master. */
export type MasterMessage = z.infer<typeof MasterMessageSchema>;

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type SequenceFields = 'protocol_version' | 'boot_id' | 'seq';

/** A sequenced master message (assign, cancel, query) before the outbox stamps its place in the sequence. */
export type MasterSequencedBody = DistributiveOmit<
  Extract<MasterMessage, { type: 'assign' | 'cancel' | 'query' }>,
  SequenceFields
>;

/** A sequenced worker message (sample, execution, log, output, probe) before the outbox stamps it. */
export type WorkerSequencedBody = DistributiveOmit<
  Extract<WorkerMessage, { type: 'sample' | 'execution' | 'log' | 'output' | 'probe' }>,
  SequenceFields
>;
