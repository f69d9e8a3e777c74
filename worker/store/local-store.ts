import Database from 'better-sqlite3';
import type {
  ExecutionPlan,
  FailureReason,
  OutputRecord,
  SlurmJobReport,
} from '../../src/contracts/worker-protocol.js';
import { ExecutionPlanSchema } from '../../src/contracts/worker-protocol.js';
import type { ReportedPhase } from '../../src/domain/execution.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import { migrateLocalStore } from './local-store-migrations.js';
import { ExecutionMoveError, moveRecordedPhase } from './local-store-moves.js';

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
 *
 * Every method is synchronous (better-sqlite3), so each one is atomic on its own; `transaction` groups
 * several, e.g. "epoch check + execution record + master mark" for one incoming assign.
 */

/** The schema version this code writes (PRAGMA user_version); the migrations are files. */
export { LOCAL_STORE_SCHEMA_VERSION } from './local-store-migrations.js';

/** How many master boot ids a `hello` may carry (contracts: `master_marks` max 16). */
const MAX_MASTER_MARKS = 16;

/** Result of an epoch check: accepted, or refused naming the card whose mark is higher. */
export type EpochCheck =
  | { readonly ok: true }
  | {
      readonly ok: false;
      readonly code: 'STALE_EPOCH';
      readonly card_index: number;
      readonly recorded_epoch: number;
    };

/** What the worker keeps of an execution's outcome (the bytes of outputs are not kept here). */
export interface ExecutionSummary {
  readonly exit_code: number | null;
  readonly signal: string | null;
  readonly failure_reason: FailureReason | null;
  readonly outputs: readonly OutputRecord[];
  readonly cleaned?: boolean;
  readonly detail?: string;
}

/** One execution as the worker knows it. */
export interface ExecutionRecord {
  readonly execution_id: string;
  readonly task_id: string;
  readonly lease_epoch: number;
  readonly phase: ReportedPhase;
  readonly plan: ExecutionPlan;
  readonly result: ExecutionSummary | null;
  /** The task's process group id once it was spawned; null before, or when it never ran. */
  readonly pgid: number | null;
  /** Slurm workers: the job behind it as last seen (job id, state, pending reason, binding); else null. */
  readonly slurm: SlurmJobReport | null;
  readonly created_at: number;
  readonly updated_at: number;
}

/** One outgoing message waiting for (or holding) its acknowledgement. */
export interface OutboxEntry {
  readonly boot_id: string;
  readonly seq: number;
  /** The message as built by the caller, with its `boot_id` and `seq`. */
  readonly message: unknown;
  readonly created_at: number;
}

/** An unacknowledged message with its position in the outbox, for sending in pages. */
export interface OutboxPageEntry extends OutboxEntry {
  /** Position in the outbox: increases with every append, across boots. */
  readonly id: number;
}

/** A highest processed seq for one master boot. */
export interface MasterMark {
  readonly boot_id: string;
  readonly seq: number;
}

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
   * it, issue 10 row 2). Otherwise raises all their marks to `epoch`. Atomic: either every mark is
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
   * EXECUTION_TABLE (src/domain/execution.ts, the master's table) and the stored phase must still be
   * `from`. The result, when given, replaces the stored one. Throws ExecutionMoveError: INVALID_STATE
   * (not in the table), CONFLICT (the stored phase is not `from`), NOT_FOUND; nothing is written then.
   */
  moveExecution(
    executionId: string,
    from: ReportedPhase,
    to: ReportedPhase,
    result?: ExecutionSummary,
  ): ExecutionRecord;
  /** Records the process group id of a running execution (see `ExecutionRecord.pgid`). */
  setExecutionPgid(executionId: string, pgid: number): void;
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
  /** Marks one message acknowledged; returns whether it was waiting. */
  ackOutbox(bootId: string, seq: number): boolean;
  /** Marks every message of `bootId` up to `seq` acknowledged (from `welcome.worker_marks`); returns how many. */
  ackOutboxThrough(bootId: string, seq: number): number;
  /** Unacknowledged messages in the order they were appended (older boots first), at most `limit`. */
  listUnackedOutbox(limit?: number): OutboxEntry[];
  /** Like `listUnackedOutbox`, but only those appended after position `afterId` (0 = from the start). */
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
  /** Runs `fn` in one immediate transaction (nested calls become savepoints). */
  transaction<T>(fn: () => T): T;
  /** Closes the file. */
  close(): void;
}

interface ExecutionRow {
  execution_id: string;
  task_id: string;
  lease_epoch: number;
  phase: ReportedPhase;
  plan_json: string;
  result_json: string | null;
  pgid: number | null;
  slurm_json: string | null;
  created_at: number;
  updated_at: number;
}

interface OutboxRow {
  boot_id: string;
  seq: number;
  message_json: string;
  created_at: number;
}

/** Opens (creating and migrating as needed) the store at `path`; `:memory:` for tests. */
export function openLocalStore(path: string, opts: LocalStoreOptions = {}): LocalStore {
  const clock = opts.clock ?? systemClock;
  const now = () => clock.now();
  const db = new Database(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('foreign_keys = ON');
    db.pragma('busy_timeout = 5000');
    migrateLocalStore(db);
  } catch (err) {
    db.close();
    throw err;
  }

  const stmts = {
    cardEpoch: db.prepare<[number], { epoch: number }>('SELECT epoch FROM card_epochs WHERE card_index = ?'),
    cardEpochs: db.prepare<[], { index: number; epoch: number }>(
      'SELECT card_index AS "index", epoch FROM card_epochs ORDER BY card_index LIMIT 1024',
    ),
    raiseCard: db.prepare<[number, number]>(
      `INSERT INTO card_epochs (card_index, epoch) VALUES (?, ?)
       ON CONFLICT (card_index) DO UPDATE SET epoch = max(epoch, excluded.epoch)`,
    ),
    insertExecution: db.prepare<[string, string, number, string, string, string | null, number, number]>(
      `INSERT INTO executions (execution_id, task_id, lease_epoch, phase, plan_json, result_json, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (execution_id) DO NOTHING`,
    ),
    moveExecution: db.prepare<[string, string | null, number, string, string]>(
      `UPDATE executions SET phase = ?, result_json = coalesce(?, result_json), updated_at = ?
       WHERE execution_id = ? AND phase = ?`,
    ),
    getExecution: db.prepare<[string], ExecutionRow>('SELECT * FROM executions WHERE execution_id = ?'),
    unfinished: db.prepare<[], ExecutionRow>(
      `SELECT * FROM executions WHERE phase NOT IN ('rejected', 'cleaned', 'cleanup_failed')
       ORDER BY created_at, execution_id`,
    ),
    known: db.prepare<[number], ExecutionRow>(
      `SELECT * FROM executions
       ORDER BY phase IN ('rejected', 'cleaned', 'cleanup_failed'), updated_at DESC, execution_id LIMIT ?`,
    ),
    setSlurm: db.prepare<[string, number, string]>(
      'UPDATE executions SET slurm_json = ?, updated_at = ? WHERE execution_id = ?',
    ),
    setPgid: db.prepare<[number, number, string]>(
      'UPDATE executions SET pgid = ?, updated_at = ? WHERE execution_id = ?',
    ),
    nextSeq: db.prepare<[string], { last_seq: number }>(
      `INSERT INTO outbox_seqs (boot_id, last_seq) VALUES (?, 1)
       ON CONFLICT (boot_id) DO UPDATE SET last_seq = last_seq + 1
       RETURNING last_seq`,
    ),
    insertOutbox: db.prepare<[string, number, string, string | null, number]>(
      'INSERT INTO outbox (boot_id, seq, message_json, kind, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    ack: db.prepare<[number, string, number]>(
      'UPDATE outbox SET acked_at = ? WHERE boot_id = ? AND seq = ? AND acked_at IS NULL',
    ),
    ackThrough: db.prepare<[number, string, number]>(
      'UPDATE outbox SET acked_at = ? WHERE boot_id = ? AND seq <= ? AND acked_at IS NULL',
    ),
    unacked: db.prepare<[number], OutboxRow>(
      'SELECT boot_id, seq, message_json, created_at FROM outbox WHERE acked_at IS NULL ORDER BY id LIMIT ?',
    ),
    unackedAfter: db.prepare<[number, number], OutboxRow & { id: number }>(
      `SELECT id, boot_id, seq, message_json, created_at FROM outbox
       WHERE acked_at IS NULL AND id > ? ORDER BY id LIMIT ?`,
    ),
    supersede: db.prepare<[number, string]>(
      'UPDATE outbox SET acked_at = ? WHERE acked_at IS NULL AND kind = ?',
    ),
    prune: db.prepare<[number]>('DELETE FROM outbox WHERE acked_at IS NOT NULL AND acked_at < ?'),
    prunableDirs: db.prepare<[number, number, number], { execution_id: string }>(
      `SELECT execution_id FROM (
         SELECT execution_id, updated_at, dir_pruned_at FROM executions
         WHERE phase IN ('cleaned', 'rejected')
         ORDER BY updated_at DESC, execution_id LIMIT -1 OFFSET ?
       ) AS old
       WHERE dir_pruned_at IS NULL AND updated_at < ?
         AND NOT EXISTS (SELECT 1 FROM outbox WHERE acked_at IS NULL
                         AND json_extract(message_json, '$.execution_id') = old.execution_id)
       ORDER BY updated_at LIMIT ?`,
    ),
    markDirPruned: db.prepare<[number, string]>(
      'UPDATE executions SET dir_pruned_at = ? WHERE execution_id = ?',
    ),
    masterMark: db.prepare<[string], { seq: number }>('SELECT seq FROM master_marks WHERE boot_id = ?'),
    raiseMaster: db.prepare<[string, number, number]>(
      `INSERT INTO master_marks (boot_id, seq, updated_at) VALUES (?, ?, ?)
       ON CONFLICT (boot_id) DO UPDATE SET seq = excluded.seq, updated_at = excluded.updated_at
       WHERE excluded.seq > seq`,
    ),
    listMaster: db.prepare<[number], MasterMark>(
      'SELECT boot_id, seq FROM master_marks ORDER BY updated_at DESC, boot_id LIMIT ?',
    ),
    pruneMaster: db.prepare<[number]>(
      `DELETE FROM master_marks WHERE boot_id NOT IN
         (SELECT boot_id FROM master_marks ORDER BY updated_at DESC, boot_id LIMIT ?)`,
    ),
  };

  const getCardEpoch = (cardIndex: number): number => stmts.cardEpoch.get(cardIndex)?.epoch ?? 0;
  const getExecution = (id: string): ExecutionRecord | null => {
    const row = stmts.getExecution.get(id);
    return row === undefined ? null : toExecutionRecord(row);
  };

  const checkAndRaiseEpoch = db.transaction(
    (cardIndexes: readonly number[], epoch: number, strict: boolean): EpochCheck => {
      // Check every card before raising any, so a refusal leaves no mark behind.
      for (const card of cardIndexes) {
        const recorded = getCardEpoch(card);
        if (recorded > epoch || (strict && recorded === epoch))
          return { ok: false, code: 'STALE_EPOCH', card_index: card, recorded_epoch: recorded };
      }
      for (const card of cardIndexes) stmts.raiseCard.run(card, epoch);
      return { ok: true };
    },
  );

  const recordExecution = db.transaction(
    (plan: ExecutionPlan, phase: ReportedPhase, result: ExecutionSummary | undefined): ExecutionRecord => {
      moveRecordedPhase(plan.execution_id, 'assigned', phase, getExecution(plan.execution_id)?.phase ?? null);
      const t = now();
      const json = result === undefined ? null : JSON.stringify(result);
      const { execution_id, task_id, lease_epoch } = plan;
      const inserted = stmts.insertExecution.run(
        execution_id,
        task_id,
        lease_epoch,
        phase,
        JSON.stringify(plan),
        json,
        t,
        t,
      );
      if (inserted.changes !== 1) throw new ExecutionMoveError('CONFLICT', execution_id, 'assigned', phase);
      return getExecution(execution_id)!;
    },
  );

  const moveExecution = db.transaction(
    (id: string, from: ReportedPhase, to: ReportedPhase, result: ExecutionSummary | undefined) => {
      moveRecordedPhase(id, from, to, getExecution(id)?.phase ?? null);
      const json = result === undefined ? null : JSON.stringify(result);
      // Compare-and-set on the phase read above: a concurrent writer makes this a CONFLICT, not a jump.
      if (stmts.moveExecution.run(to, json, now(), id, from).changes !== 1)
        throw new ExecutionMoveError('CONFLICT', id, from, to);
      return getExecution(id)!;
    },
  );

  const appendOutbox = db.transaction((bootId: string, build: (seq: number) => unknown): OutboxEntry => {
    const seq = stmts.nextSeq.get(bootId)!.last_seq;
    const message = build(seq);
    const created = now();
    const kind = (message as { type?: unknown } | null)?.type;
    stmts.insertOutbox.run(
      bootId,
      seq,
      JSON.stringify(message),
      typeof kind === 'string' ? kind : null,
      created,
    );
    return { boot_id: bootId, seq, message, created_at: created };
  });

  const raiseMasterMark = db.transaction((bootId: string, seq: number): boolean => {
    const changed = stmts.raiseMaster.run(bootId, seq, now()).changes > 0;
    // A hello carries at most 16 marks; older master boots are long gone and will not resend.
    if (changed) stmts.pruneMaster.run(MAX_MASTER_MARKS);
    return changed;
  });

  return {
    checkAndRaiseEpoch: (cards, epoch, opts = {}) =>
      checkAndRaiseEpoch.immediate(cards, epoch, opts.strict ?? false),
    getCardEpoch,
    recordExecution: (plan, phase, result) => recordExecution.immediate(plan, phase, result),
    moveExecution: (id, from, to, result) => moveExecution.immediate(id, from, to, result),
    setExecutionPgid: (executionId, pgid) => {
      stmts.setPgid.run(pgid, now(), executionId);
    },
    setExecutionSlurm: (executionId, slurm) => {
      stmts.setSlurm.run(JSON.stringify(slurm), now(), executionId);
    },
    getExecution,
    listUnfinishedExecutions: () => stmts.unfinished.all().map(toExecutionRecord),
    listKnownExecutions: (limit) => stmts.known.all(limit).map(toExecutionRecord),
    appendOutbox: (bootId, build) => appendOutbox.immediate(bootId, build),
    ackOutbox: (bootId, seq) => stmts.ack.run(now(), bootId, seq).changes > 0,
    ackOutboxThrough: (bootId, seq) => stmts.ackThrough.run(now(), bootId, seq).changes,
    listUnackedOutbox: (limit = 10_000) =>
      stmts.unacked.all(limit).map((r) => ({
        boot_id: r.boot_id,
        seq: r.seq,
        message: JSON.parse(r.message_json) as unknown,
        created_at: r.created_at,
      })),
    listUnackedOutboxAfter: (afterId, limit) =>
      stmts.unackedAfter.all(afterId, limit).map((r) => ({
        id: r.id,
        boot_id: r.boot_id,
        seq: r.seq,
        message: JSON.parse(r.message_json) as unknown,
        created_at: r.created_at,
      })),
    supersedeUnacked: (type) => stmts.supersede.run(now(), type).changes,
    pruneOutbox: (before) => stmts.prune.run(before).changes,
    listPrunableExecutionDirs: (before, keep, limit) =>
      stmts.prunableDirs.all(keep, before, limit).map((r) => r.execution_id),
    markExecutionDirPruned: (id) => {
      stmts.markDirPruned.run(now(), id);
    },
    getMasterMark: (bootId) => stmts.masterMark.get(bootId)?.seq ?? 0,
    raiseMasterMark: (bootId, seq) => raiseMasterMark.immediate(bootId, seq),
    listMasterMarks: () => stmts.listMaster.all(MAX_MASTER_MARKS),
    listCardEpochs: () => stmts.cardEpochs.all(),
    transaction: (fn) => db.transaction(fn).immediate(),
    close: () => db.close(),
  };
}

function toExecutionRecord(row: ExecutionRow): ExecutionRecord {
  return {
    execution_id: row.execution_id,
    task_id: row.task_id,
    lease_epoch: row.lease_epoch,
    phase: row.phase,
    // Parsed, not cast: a damaged file must fail loudly rather than hand the worker a bad plan.
    plan: ExecutionPlanSchema.parse(JSON.parse(row.plan_json)),
    result: row.result_json === null ? null : (JSON.parse(row.result_json) as ExecutionSummary),
    pgid: row.pgid,
    slurm: row.slurm_json == null ? null : (JSON.parse(row.slurm_json) as SlurmJobReport),
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}
