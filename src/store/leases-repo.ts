import type { FailureReason, OutputRecord, SlurmJobReport } from '../contracts/worker-protocol.js';
import type { ExecutionPhase } from '../domain/machines/execution.js';
import type { LeaseState } from '../domain/machines/lease.js';
import type { Db } from './db.js';

/** One card of a lease: its index on the worker and its uuid. */
export interface LeaseCard {
  index: number;
  uuid: string;
}

/** How many leases' cards `LeasesRepo` remembers before it starts again. */
const CARDS_MEMO_MAX = 4096;

/** A lease row with its cards. */
export interface LeaseRecord {
  id: string;
  task_id: string;
  worker_id: string;
  lease_epoch: number;
  state: LeaseState;
  reason: string | null;
  created_at: number;
  updated_at: number;
  released_at: number | null;
  cards: LeaseCard[];
}

/** Where an execution stands as the worker reported it (the execution machine's states). */
export type ExecutionPhaseRecord = ExecutionPhase;

/** An execution row. */
export interface ExecutionRecord {
  id: string;
  task_id: string;
  lease_id: string;
  assignment_id: string;
  worker_id: string;
  lease_epoch: number;
  phase: ExecutionPhaseRecord;
  exit_code: number | null;
  signal: string | null;
  failure_reason: FailureReason | null;
  outputs: OutputRecord[] | null;
  detail: string | null;
  created_at: number;
  updated_at: number;
  offline_since: number | null;
}

interface LeaseRow extends Omit<LeaseRecord, 'cards'> {}
interface ExecutionRow extends Omit<ExecutionRecord, 'outputs'> {
  outputs: string | null;
  /** Read through `executionSlurm` only; kept out of ExecutionRecord so its writers need not carry it. */
  slurm?: string | null;
}

/** A live lease's card, for scheduling snapshots. */
export interface LiveLeaseCard {
  lease_id: string;
  task_id: string;
  owner_id: string;
  worker_id: string;
  card_index: number;
  lease_epoch: number;
  state: LeaseState;
  /**
   * When its run is stopped at the latest (ms): its task's start + `time_limit_seconds`, or a backfilled
   * lease's `stop_by` if that is earlier (before the start: `stop_by`); null: not started, not backfilled.
   */
  limit_ends_at: number | null;
}

const toExecution = ({ slurm: _slurm, ...r }: ExecutionRow): ExecutionRecord => ({
  ...r,
  outputs: r.outputs === null ? null : (JSON.parse(r.outputs) as OutputRecord[]),
});

/** Leases, their cards, per-card epochs, and executions. */
export class LeasesRepo {
  private readonly s;
  /**
   * A lease's cards by lease id. They never change once inserted (only their `live` flag, which no
   * reader of this memo sees), so no other writer can make an entry stale; a lease's row is read first,
   * so a pruned or rolled-back lease is never answered from here, and `insertLease` drops the entry, so
   * an id inserted again after its first insert rolled back is read again. A report read them two to four times
   * per task. Bounded: emptied when it reaches CARDS_MEMO_MAX.
   */
  private readonly cardsMemo = new Map<string, ReadonlyArray<Readonly<LeaseCard>>>();

  constructor(db: Db) {
    this.s = {
      epoch: db.prepare<[string, number], { epoch: number }>(
        'SELECT epoch FROM card_epochs WHERE worker_id = ? AND card_index = ?',
      ),
      setEpoch: db.prepare(
        'INSERT INTO card_epochs (worker_id, card_index, epoch) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET epoch = max(epoch, excluded.epoch)',
      ),
      insertLease: db.prepare(
        `INSERT INTO leases (id, task_id, worker_id, lease_epoch, state, reason, created_at, updated_at, released_at, memory_mib, disk_mib, cpus, stop_by)
         VALUES (@id, @task_id, @worker_id, @lease_epoch, @state, @reason, @created_at, @updated_at, @released_at, @memory_mib, @disk_mib, @cpus, @stop_by)`,
      ),
      committed: db.prepare<
        [],
        { worker_id: string; memory_mib: number | null; disk_mib: number | null; cpus: number | null }
      >(
        `SELECT worker_id, sum(memory_mib) AS memory_mib, sum(disk_mib) AS disk_mib, sum(cpus) AS cpus FROM leases
         WHERE state <> 'RELEASED' AND (memory_mib IS NOT NULL OR disk_mib IS NOT NULL OR cpus IS NOT NULL)
         GROUP BY worker_id`,
      ),
      insertCard: db.prepare(
        'INSERT INTO lease_cards (lease_id, worker_id, card_index, card_uuid, live) VALUES (?, ?, ?, ?, 1)',
      ),
      lease: db.prepare<[string], LeaseRow>(
        'SELECT id, task_id, worker_id, lease_epoch, state, reason, created_at, updated_at, released_at FROM leases WHERE id = ?',
      ),
      leaseCards: db.prepare<[string], { index: number; uuid: string }>(
        'SELECT card_index AS "index", card_uuid AS uuid FROM lease_cards WHERE lease_id = ? ORDER BY card_index',
      ),
      latestLeaseForTask: db.prepare<[string], LeaseRow>(
        'SELECT id, task_id, worker_id, lease_epoch, state, reason, created_at, updated_at, released_at FROM leases WHERE task_id = ? ORDER BY created_at DESC, id DESC LIMIT 1',
      ),
      updateLease: db.prepare(
        'UPDATE leases SET state = @state, reason = @reason, updated_at = @updated_at, released_at = @released_at WHERE id = @id AND state = @expected_state',
      ),
      releaseCards: db.prepare('UPDATE lease_cards SET live = 0 WHERE lease_id = ?'),
      liveCards: db.prepare<[], LiveLeaseCard>(
        `SELECT l.id AS lease_id, l.task_id, t.owner_id, l.worker_id, c.card_index, l.lease_epoch, l.state,
           CASE
             WHEN l.stop_by IS NULL THEN t.started_at + json_extract(t.spec, '$.time_limit_seconds') * 1000
             WHEN t.started_at IS NULL THEN l.stop_by
             ELSE min(l.stop_by, t.started_at + json_extract(t.spec, '$.time_limit_seconds') * 1000)
           END AS limit_ends_at
         FROM lease_cards c JOIN leases l ON l.id = c.lease_id JOIN tasks t ON t.id = l.task_id WHERE c.live = 1`,
      ),
      liveLeases: db.prepare<[], LeaseRow>(
        "SELECT id, task_id, worker_id, lease_epoch, state, reason, created_at, updated_at, released_at FROM leases WHERE state <> 'RELEASED' ORDER BY created_at",
      ),
      insertExecution: db.prepare(
        `INSERT INTO executions (id, task_id, lease_id, assignment_id, worker_id, lease_epoch, phase, exit_code, signal,
           failure_reason, outputs, detail, created_at, updated_at, offline_since)
         VALUES (@id, @task_id, @lease_id, @assignment_id, @worker_id, @lease_epoch, @phase, @exit_code, @signal,
           @failure_reason, @outputs, @detail, @created_at, @updated_at, @offline_since)`,
      ),
      execution: db.prepare<[string], ExecutionRow>('SELECT * FROM executions WHERE id = ?'),
      executionForLease: db.prepare<[string], ExecutionRow>('SELECT * FROM executions WHERE lease_id = ?'),
      updateExecution: db.prepare(
        `UPDATE executions SET phase = @phase, exit_code = @exit_code, signal = @signal, failure_reason = @failure_reason,
           outputs = @outputs, detail = @detail, updated_at = @updated_at, offline_since = @offline_since
         WHERE id = @id AND phase = @expected`,
      ),
      executionSlurm: db.prepare<[string], { slurm: string | null }>(
        'SELECT slurm FROM executions WHERE id = ?',
      ),
      setExecutionSlurm: db.prepare('UPDATE executions SET slurm = ? WHERE id = ?'),
      liveSlurmJobs: db.prepare<[], { worker_id: string; slurm: string }>(
        `SELECT l.worker_id, e.slurm FROM leases l JOIN executions e ON e.lease_id = l.id
         WHERE l.state <> 'RELEASED' AND e.slurm IS NOT NULL ORDER BY l.created_at`,
      ),
      unfinishedForWorker: db.prepare<[string], ExecutionRow>(
        "SELECT * FROM executions WHERE worker_id = ? AND phase NOT IN ('rejected','cleaned','cleanup_failed') ORDER BY created_at",
      ),
      unfinished: db.prepare<[], ExecutionRow>(
        "SELECT * FROM executions WHERE phase NOT IN ('rejected','cleaned','cleanup_failed') ORDER BY created_at",
      ),
    };
  }

  /** Highest epoch issued per card (0 if never leased). */
  epochsOf(workerId: string, indexes: readonly number[]): number[] {
    return indexes.map((i) => this.s.epoch.get(workerId, i)?.epoch ?? 0);
  }

  /** Raises a card's highest issued epoch to at least `epoch` (a worker's mark learnt at hello). */
  raiseEpoch(workerId: string, index: number, epoch: number): void {
    this.s.setEpoch.run(workerId, index, epoch);
  }

  /**
   * Inserts a lease and its cards, raising the per-card epochs. A card already live fails the unique index.
   * `given`: the memory and disk its task was given on that worker's host (null: the host is not known);
   * `cpus`: the CPUs its task asked for (null: none); `stopBy`: a backfilled lease's deadline (ms; null:
   * not backfilled, migration 025).
   */
  insertLease(
    l: LeaseRecord,
    given: { memory_mib: number; disk_mib: number } | null = null,
    cpus: number | null = null,
    stopBy: number | null = null,
  ): void {
    // Cards remembered for this id belong to an earlier insert that rolled back: read them again.
    this.cardsMemo.delete(l.id);
    this.s.insertLease.run({
      ...l,
      cards: undefined,
      memory_mib: given?.memory_mib ?? null,
      disk_mib: given?.disk_mib ?? null,
      cpus,
      stop_by: stopBy,
    });
    for (const c of l.cards) {
      this.s.insertCard.run(l.id, l.worker_id, c.index, c.uuid);
      this.s.setEpoch.run(l.worker_id, c.index, l.lease_epoch);
    }
  }

  /** A lease's cards, oldest index first (see `cardsMemo`); a fresh array each call. */
  private cardsOf(leaseId: string): LeaseCard[] {
    let cards = this.cardsMemo.get(leaseId);
    if (cards === undefined) {
      cards = this.s.leaseCards.all(leaseId).map((c) => Object.freeze(c));
      // An empty answer is not remembered: the lease's cards may not be inserted yet.
      if (cards.length > 0) this.remember(leaseId, cards);
    }
    return cards.slice();
  }

  private remember(leaseId: string, cards: ReadonlyArray<Readonly<LeaseCard>>): void {
    if (this.cardsMemo.size >= CARDS_MEMO_MAX) this.cardsMemo.clear();
    this.cardsMemo.set(leaseId, cards);
  }

  /** One lease with its cards. */
  lease(id: string): LeaseRecord | undefined {
    const r = this.s.lease.get(id);
    return r ? { ...r, cards: this.cardsOf(r.id) } : undefined;
  }

  /** The newest lease of a task. */
  latestLeaseForTask(taskId: string): LeaseRecord | undefined {
    const r = this.s.latestLeaseForTask.get(taskId);
    return r ? { ...r, cards: this.cardsOf(r.id) } : undefined;
  }

  /** Compare-and-set lease update; releasing frees its cards in the same statement group. */
  updateLease(l: LeaseRecord, expected: LeaseState): boolean {
    const ok =
      this.s.updateLease.run({
        id: l.id,
        state: l.state,
        reason: l.reason,
        updated_at: l.updated_at,
        released_at: l.released_at,
        expected_state: expected,
      }).changes === 1;
    if (ok && l.state === 'RELEASED') this.s.releaseCards.run(l.id);
    return ok;
  }

  /** Cards held by live (non-released) leases. */
  /** Per worker, the memory and task-dir disk its live leases' tasks were given (MiB), and the CPUs they asked for. */
  committedByWorker(): Map<string, { memory_mib: number; disk_mib: number; cpus: number }> {
    return new Map(
      this.s.committed
        .all()
        .map((r) => [
          r.worker_id,
          { memory_mib: r.memory_mib ?? 0, disk_mib: r.disk_mib ?? 0, cpus: r.cpus ?? 0 },
        ]),
    );
  }

  liveCards(): LiveLeaseCard[] {
    return this.s.liveCards.all();
  }

  /** Live leases. */
  liveLeases(): LeaseRecord[] {
    return this.s.liveLeases.all().map((r) => ({ ...r, cards: this.cardsOf(r.id) }));
  }

  /** Inserts an execution. */
  insertExecution(e: ExecutionRecord): void {
    this.s.insertExecution.run({ ...e, outputs: e.outputs === null ? null : JSON.stringify(e.outputs) });
  }

  /** One execution. */
  execution(id: string): ExecutionRecord | undefined {
    const r = this.s.execution.get(id);
    return r ? toExecution(r) : undefined;
  }

  /** One execution and the Slurm job behind it (as `executionSlurm` says), from one read. */
  executionAndSlurm(id: string): { execution: ExecutionRecord; slurm: SlurmJobReport | null } | undefined {
    const r = this.s.execution.get(id);
    if (!r) return undefined;
    const raw = r.slurm ?? null;
    return { execution: toExecution(r), slurm: raw === null ? null : (JSON.parse(raw) as SlurmJobReport) };
  }

  /** The execution of a lease. */
  executionForLease(leaseId: string): ExecutionRecord | undefined {
    const r = this.s.executionForLease.get(leaseId);
    return r ? toExecution(r) : undefined;
  }

  /**
   * Writes a moved execution if its stored phase is still `expected` (compare-and-set); false when
   * another writer moved it first. Only `moveExecution` (src/broker/machines/execution.ts) calls this.
   */
  updateExecution(e: ExecutionRecord, expected: ExecutionPhaseRecord): boolean {
    const outputs = e.outputs === null ? null : JSON.stringify(e.outputs);
    return this.s.updateExecution.run({ ...e, outputs, expected }).changes === 1;
  }

  /** The Slurm job behind an execution as its worker last reported it; null on a local worker. */
  executionSlurm(id: string): SlurmJobReport | null {
    const raw = this.s.executionSlurm.get(id)?.slurm ?? null;
    return raw === null ? null : (JSON.parse(raw) as SlurmJobReport);
  }

  /**
   * The Slurm jobs behind live leases (ACTIVE, RELEASING or QUARANTINED: their GPUs may still be held),
   * as their workers last reported them; the scheduler charges started jobs to their nodes.
   */
  liveSlurmJobs(): Array<{ worker_id: string; slurm: SlurmJobReport }> {
    return this.s.liveSlurmJobs
      .all()
      .map((r) => ({ worker_id: r.worker_id, slurm: JSON.parse(r.slurm) as SlurmJobReport }));
  }

  /** Records the Slurm job behind an execution (the worker's latest report of it). */
  setExecutionSlurm(id: string, report: SlurmJobReport): void {
    this.s.setExecutionSlurm.run(JSON.stringify(report), id);
  }

  /** A worker's executions that have not finished. */
  unfinishedForWorker(workerId: string): ExecutionRecord[] {
    return this.s.unfinishedForWorker.all(workerId).map(toExecution);
  }

  /** All unfinished executions. */
  unfinished(): ExecutionRecord[] {
    return this.s.unfinished.all().map(toExecution);
  }
}
