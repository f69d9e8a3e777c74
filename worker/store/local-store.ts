import type { ExecutionPlan, SlurmJobReport } from '../../src/contracts/worker-protocol.js';
import type { ReportedPhase } from '../../src/domain/machines/execution.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import { inImmediateTransaction, openLocalDb } from './db.js';
import {
  type ExecutionRecord,
  type ExecutionSummary,
  executionsRepo,
  type ProcessIdentity,
} from './executions-repo.js';
import { logQueueRepo, type QueuedLogChunk } from './log-queue-repo.js';
import { type EpochCheck, type MasterMark, marksRepo } from './marks-repo.js';
import { type OutboxAck, type OutboxEntry, type OutboxPageEntry, outboxRepo } from './outbox-repo.js';

/**
 * The worker's own small SQLite file (docs/worker-protocol.md): what must survive a worker restart.
 *
 *   card_epochs   per card, the highest lease epoch seen; an assign or cancel below it is STALE_EPOCH
 *   executions    what the worker knows about each execution (reported in `hello`), with the task's
 *                 process group id once it runs, so a restarted worker can stop what it left behind
 *   outbox        outgoing sequenced messages, kept until the master acknowledges them
 *   outbox_seqs   the last seq handed out per worker boot; kept apart from the outbox so that pruning
 *                 acknowledged messages can never make a seq be issued twice
 *   master_marks  the highest master seq processed per master boot id, to drop resent duplicates
 *   log_queue     log chunks waiting for their fair turn to enter the outbox (link/log-lane.ts)
 *
 * Every method is synchronous (better-sqlite3), so each one is atomic on its own; `transaction` groups
 * several, e.g. "epoch check + execution record + master mark" for one incoming assign.
 */

// The records and results of the store are defined next to the tables that hold them.
export type { ExecutionRecord, ExecutionSummary } from './executions-repo.js';
/** The schema version this code writes (PRAGMA user_version); the migrations are files. */
export { LOCAL_STORE_SCHEMA_VERSION } from './local-store-migrations.js';
export type { QueuedLogChunk } from './log-queue-repo.js';
export type { OutboxAck, OutboxEntry } from './outbox-repo.js';

/** Options for opening the store. */
export interface LocalStoreOptions {
  /** Where every stored timestamp comes from (the daemon's clock; tests pass a ManualClock). */
  readonly clock?: Clock;
}

/** The worker's local store; see the module comment. Close it when done. */
export interface LocalStore {
  /**
   * Refuses with STALE_EPOCH if any of `cardIndexes` has a recorded epoch above `epoch` — or, with
   * `strict`, equal to it: an assign for an execution this worker does not know yet must be above every
   * mark, since an equal epoch belongs to another execution (a master restored from a backup re-issuing
   * it). Otherwise raises all their marks to `epoch`. Atomic: either every mark is
   * raised or none is. Call it before any side effect of the message.
   */
  checkAndRaiseEpoch(cardIndexes: readonly number[], epoch: number, opts?: { strict?: boolean }): EpochCheck;
  /** The recorded epoch of one card, or 0 when none was ever seen. */
  getCardEpoch(cardIndex: number): number;
  /** Every card's recorded epoch, for `hello.card_epochs`. */
  listCardEpochs(): Array<{ index: number; epoch: number }>;
  /**
   * Records a new execution at its first phase: the table's move out of `assigned` (`accepted`, or
   * `rejected` with the reason in `result`). Throws ExecutionMoveError CONFLICT when the execution is
   * already recorded: its plan, task id and epoch are immutable, and a known execution is never re-run.
   */
  recordExecution(
    plan: ExecutionPlan,
    phase: 'accepted' | 'rejected',
    result?: ExecutionSummary,
  ): ExecutionRecord;
  /**
   * Moves an execution `from` → `to` with compare-and-set (ADR 0014): the move must be a row of
   * EXECUTION_TABLE (src/domain/machines/execution.ts, the master's table) and the stored phase must still be
   * `from`. The result, when given, replaces the stored one. Throws ExecutionMoveError: INVALID_STATE
   * (not in the table), CONFLICT (the stored phase is not `from`), NOT_FOUND; nothing is written then.
   */
  moveExecution(
    executionId: string,
    from: ReportedPhase,
    to: ReportedPhase,
    result?: ExecutionSummary,
  ): ExecutionRecord;
  /**
   * Records the process group id of a running execution and, when known, who its leader is (see
   * `ExecutionRecord.pgid`, `pgid_identity`).
   */
  setExecutionPgid(executionId: string, pgid: number, identity?: ProcessIdentity | null): void;
  /** Records the Slurm job behind an execution (see `ExecutionRecord.slurm`). */
  setExecutionSlurm(executionId: string, slurm: SlurmJobReport): void;
  /** One execution, or null. */
  getExecution(executionId: string): ExecutionRecord | null;
  /** Executions not yet in a terminal phase (rejected, cleaned, cleanup_failed), oldest first. */
  listUnfinishedExecutions(): ExecutionRecord[];
  /** At most `limit` executions for `hello`: every unfinished one first, then the most recently updated. */
  listKnownExecutions(limit: number): ExecutionRecord[];
  /**
   * Appends a message for `bootId` with the next seq of that boot, atomically. `build` receives the seq
   * and returns the message to store (it should carry `boot_id` and `seq`).
   */
  appendOutbox(bootId: string, build: (seq: number) => unknown): OutboxEntry;
  /** Marks one message acknowledged (a log chunk is deleted at once); returns whether it was waiting. */
  ackOutbox(bootId: string, seq: number): boolean;
  /**
   * Like `ackOutbox` for each of `acks`, in one transaction; returns how many were waiting. An ack of a
   * message that is unknown or already acknowledged changes nothing.
   */
  ackOutboxMany(acks: readonly OutboxAck[]): number;
  /** Whether any message waits for its acknowledgement. */
  hasUnackedOutbox(): boolean;
  /**
   * Marks every message of `bootId` up to `seq` acknowledged (from `welcome.worker_marks`), deleting the
   * log chunks among them; returns how many.
   */
  ackOutboxThrough(bootId: string, seq: number): number;
  /** Unacknowledged messages in the order they were appended (older boots first), at most `limit`. */
  listUnackedOutbox(limit?: number): OutboxEntry[];
  /**
   * The unacknowledged messages appended after position `afterId` (0 = from the start), in order, at most
   * `limit`, as their stored text (for sending).
   */
  listUnackedOutboxAfter(afterId: number, limit: number): OutboxPageEntry[];
  /**
   * Marks every unacknowledged message whose `type` is `type` acknowledged, for messages where only the
   * newest matters (samples): a long disconnect then replays one sample, not thousands. Returns how many.
   */
  supersedeUnacked(type: string): number;
  /** Deletes acknowledged messages acknowledged before `before` (ms); returns how many. */
  pruneOutbox(before: number): number;
  /**
   * Executions whose directory retention may delete: finished with a cleanup receipt (`cleaned`) or
   * refused (`rejected`), last updated before `before`, not among the newest `keep` finished ones, and
   * with no message about them still waiting for the master's acknowledgement (the cleanup receipt,
   * logs, outputs). `cleanup_failed` ones are kept: processes may be left to investigate.
   */
  listPrunableExecutionDirs(before: number, keep: number, limit: number): string[];
  /** Records that an execution's directory was deleted. */
  markExecutionDirPruned(executionId: string): void;
  /** The highest seq processed from master boot `bootId`, or 0. */
  getMasterMark(bootId: string): number;
  /** Records `seq` as processed for `bootId` if above the mark; returns whether it was (false = duplicate). */
  raiseMasterMark(bootId: string, seq: number): boolean;
  /** The most recently advanced marks (at most 16), for `hello.master_marks`. */
  listMasterMarks(): MasterMark[];
  /** Queues one log chunk of an execution for the log lane. */
  queueLogChunk(executionId: string, stream: 'stdout' | 'stderr', offset: number, data: string): void;
  /**
   * The next execution with queued log chunks after `after` in id order, wrapping around to the first
   * (the log lane's round-robin); null when the queue is empty.
   */
  nextQueuedLogExecution(after: string): string | null;
  /**
   * The oldest queued chunks of one execution, in the order they were queued: at most `limit`, and no
   * more once they hold over `maxBytes` of UTF-8.
   */
  oldestQueuedLogChunks(executionId: string, limit: number, maxBytes: number): QueuedLogChunk[];
  /** Removes one execution's queued chunks up to position `id`; returns how many. */
  removeQueuedLogChunksThrough(executionId: string, id: number): number;
  /** UTF-8 bytes of one execution's queued chunks. */
  queuedLogBytes(executionId: string): number;
  /** Runs `fn` in one immediate transaction (nested calls become savepoints). */
  transaction<T>(fn: () => T): T;
  /** Closes the file. */
  close(): void;
}

/** Opens (creating and migrating as needed) the store at `path`; `:memory:` for tests. */
export function openLocalStore(path: string, opts: LocalStoreOptions = {}): LocalStore {
  const clock = opts.clock ?? systemClock;
  const now = () => clock.now();
  const db = openLocalDb(path);
  return {
    ...marksRepo(db, now),
    ...executionsRepo(db, now),
    ...outboxRepo(db, now),
    ...logQueueRepo(db),
    transaction: (fn) => inImmediateTransaction(db, fn),
    close: () => db.close(),
  };
}
