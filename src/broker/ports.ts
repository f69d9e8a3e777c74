import type { StorageState } from '../domain/machines/storage-state.js';
import type { SubmitterKind } from '../store/qualification-repo.js';

/**
 * The interfaces use cases call and the master's runtime implements (the hub, the scheduler, the
 * qualification service, the audit monitor, the storage guard). They live here, apart from their
 * implementations, so that `deps.ts` and every use case can name them without importing the rooms above
 * them; this file imports nothing from src/broker/.
 */

/**
 * How use cases reach workers: they append a message to the durable outbox inside their transaction;
 * once it commits, the hub is asked to flush that worker's outbox over its live session (if any).
 * A message is therefore sent only if the decision that caused it committed, and never lost if the
 * session is down: it goes out on the next `hello`. Messages are appended by `enqueueForWorker`
 * (src/broker/workers/link.ts); src/ws/hub.ts implements the link.
 */
export interface WorkerLink {
  /** This master process's boot id: the sequence space of its outgoing messages. */
  readonly bootId: string;
  /** Sends whatever the worker's outbox holds that this session has not sent yet. */
  flush(workerId: string): void;
}

/** Starts runs in the background; the master provides one once it listens. */
export interface QualificationLauncher {
  /** Throws a BrokerError when a run of this kind cannot start now (e.g. `claude` is not installed). */
  assertReady(kind: SubmitterKind): void;
  /** Starts the runner for a committed run; the tokens exist only in memory. */
  launch(runId: string, tokens: { submitter: string; reviewer: string }): void;
  /** Stops a run's runner (it ends CANCELLED); false when no runner is active for it. */
  cancel(runId: string): boolean;
}

/** Where a task runs: filled from its latest lease once the scheduler placed it. */
export interface TaskPlacement {
  worker_id: string;
  lease_epoch: number;
  cards: Array<{ index: number; uuid: string }>;
  simulated: boolean | null;
}

/** Live facts about tasks that are derived, not stored: where each runs and why each waits. */
export interface TaskObserver {
  /** Where a task runs (its latest lease), or null before it was placed. */
  placement(taskId: string): TaskPlacement | null;
  /** A queued task's wait reason and 1-based position from the latest scheduling pass. */
  queueInfo(taskId: string): { reason: Record<string, unknown>; position: number } | null;
}

/** Result of the background audit-chain check (src/broker/loops/audit-monitor.ts). */
export interface AuditStatus {
  ok: boolean;
  events: number;
  detail?: string;
}

/** What `/healthz`, `get_status` and `/metrics` read, in constant time. */
export interface StorageStatus {
  /** False while growth is refused (`refusing`, `unwritable`): `/healthz` then answers 503. */
  ok: boolean;
  state: StorageState;
  free_bytes: number | null;
  total_bytes: number | null;
  warn_free_bytes: number;
  min_free_bytes: number;
  /** Why the state is not `ok`, in words. */
  detail?: string;
}

/**
 * What use cases and edges ask the disk guard (src/broker/loops/storage-guard.ts implements it): whether
 * the store may grow now. Absent in unit fixtures, where nothing is refused.
 */
export interface StorageGate {
  /** The last state with its facts. */
  status(): StorageStatus;
  /** Whether writes that make the store grow are accepted now. */
  acceptsGrowth(): boolean;
  /** The last time growth was refused: now while it is, else the moment it last was (null: never). */
  lastRefusalAt(): number | null;
  /**
   * Throws a retryable UNAVAILABLE naming `what` unless growth is accepted and `bytes` (default 0) more
   * fit above the floor beside what writes in flight reserved.
   */
  assertAcceptsGrowth(what: string, bytes?: number): void;
  /**
   * Reserves `bytes` for a write that grows the store over time (an upload streaming to disk): checked
   * like `assertAcceptsGrowth`, then held against free space until released. Release exactly once.
   */
  reserve(what: string, bytes: number): StorageReservation;
}

/** Space held by one write in flight. */
export interface StorageReservation {
  /** Gives the space back; `written`: bytes the write added to the disk (counted until the next sample). */
  release(written?: number): void;
}
