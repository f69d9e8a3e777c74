import type { TaskSpec } from '../contracts/task-spec.js';
import type { TaskState } from '../domain/machines/task.js';
import type { Db } from './db.js';
import { selectNewestFirst } from './newest-first.js';

/** A task row. `reason` is the machine-readable wait reason while queued. */
export interface TaskRecord {
  id: string;
  proposal_id: string;
  revision_id: string;
  owner_id: string;
  spec: TaskSpec;
  spec_digest: string;
  priority: number;
  state: TaskState;
  desired: 'run' | 'cancel';
  reason: Record<string, unknown> | null;
  failure_reason: string | null;
  exit_code: number | null;
  signal: string | null;
  approved_at: number;
  created_at: number;
  updated_at: number;
  started_at: number | null;
  finished_at: number | null;
}

interface TaskRow extends Omit<TaskRecord, 'spec' | 'reason'> {
  spec: string;
  reason: string | null;
}

function toTask(row: TaskRow): TaskRecord {
  return {
    ...row,
    spec: JSON.parse(row.spec) as TaskSpec,
    reason: row.reason === null ? null : (JSON.parse(row.reason) as Record<string, unknown>),
  };
}

function toRow(t: TaskRecord): TaskRow {
  return { ...t, spec: JSON.stringify(t.spec), reason: t.reason === null ? null : JSON.stringify(t.reason) };
}

/** What a scheduling pass reads of a queued task: no full spec, so no JSON parse per task per pass. */
export interface QueuedTaskRow
  extends Pick<TaskRecord, 'id' | 'owner_id' | 'priority' | 'approved_at' | 'desired'> {
  /** The spec's cards, pinned worker and resource asks (`limits`: the host must be able to give them). */
  spec: Pick<TaskSpec, 'cards' | 'worker' | 'limits' | 'time_limit_seconds'>;
  /** The spec's `runtime.kind`: container tasks need a worker with a container engine. */
  runtime_kind: TaskSpec['runtime']['kind'];
  /** The spec's named data mounts: only workers offering all of them may take it. */
  mounts: string[];
}

/** The part of a QueuedTaskRow taken from the (immutable) spec. */
type QueuedSpecPart = Pick<QueuedTaskRow, 'spec' | 'runtime_kind' | 'mounts'>;

/** More tasks written between two reads than this: the next read is a full one (bounds `dirty`). */
const MAX_DIRTY = 10_000;

/** Whether a re-read row says what the held one says (its spec part never changes while it is queued). */
function sameQueuedRow(
  held: QueuedTaskRow,
  row: Pick<QueuedTaskRow, 'id' | 'owner_id' | 'priority' | 'approved_at' | 'desired'>,
): boolean {
  return (
    held.owner_id === row.owner_id &&
    held.priority === row.priority &&
    held.approved_at === row.approved_at &&
    held.desired === row.desired
  );
}

/** `ORDER BY priority DESC, approved_at, id` (ids are ASCII: code-unit order is SQLite's BINARY order). */
function bySchedulingOrder(a: QueuedTaskRow, b: QueuedTaskRow): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.approved_at !== b.approved_at) return a.approved_at - b.approved_at;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * A task's owner and state fields with the code of its wait reason, read without the spec (docs/performance.md, section e2e:
 * a wait_for_task wake-up or an execution report parsed the whole spec for these).
 */
export interface TaskStateFacts
  extends Pick<TaskRecord, 'owner_id' | 'state' | 'desired' | 'failure_reason'> {
  /** The code of the task's `reason` when it is a string, else null. */
  reason_code: string | null;
}

/**
 * What a worker's execution report reads of its task (src/broker/workers/reports.ts): its state facts
 * and the outputs its spec declares, taken out by SQLite's JSON functions.
 */
export interface TaskReportFacts extends TaskStateFacts {
  /** The outputs the spec declares: path and whether required. */
  outputs: Array<{ path: string; required: boolean }>;
}

/** What the metrics read of a task on each of its moves: its state and two timestamps. */
export type TaskStartFacts = Pick<TaskRecord, 'id' | 'state' | 'approved_at' | 'started_at'>;

type StateFactsRow = Pick<TaskRecord, 'owner_id' | 'state' | 'desired' | 'failure_reason'> & {
  reason_code: unknown;
};

function toStateFacts(r: StateFactsRow): TaskStateFacts {
  return {
    owner_id: r.owner_id,
    state: r.state,
    desired: r.desired,
    failure_reason: r.failure_reason,
    reason_code: typeof r.reason_code === 'string' ? r.reason_code : null,
  };
}

/** Filter for listing tasks, newest first. */
export interface TaskListQuery {
  owner_id?: string;
  state?: TaskState;
  before_id?: string;
  limit: number;
}

/** Tasks. */
export class TasksRepo {
  private readonly s;
  /**
   * The committed QUEUED set as of the last `queuedForScheduling` outside a transaction, by task id
   * (null: read it in full next time). Kept current through `dirty`: every insert and update names its
   * task there, and the next read re-reads just those rows by primary key, so a write that rolled back
   * costs one needless re-read, never a wrong row (a full read of the queue on every pass was
   * a fifth of the master's CPU per task with a few hundred queued).
   */
  private queued: Map<string, QueuedTaskRow> | null = null;
  /** `queued` in scheduling order; null when a change may have moved something. */
  private queuedOrder: QueuedTaskRow[] | null = null;
  /** Tasks written since `queued` was last brought up to date. */
  private readonly dirty = new Set<string>();

  constructor(private readonly db: Db) {
    this.s = {
      get: db.prepare<[string], TaskRow>('SELECT * FROM tasks WHERE id = ?'),
      stateFacts: db.prepare<[string], StateFactsRow>(
        `SELECT owner_id, state, desired, failure_reason, json_extract(reason, '$.code') AS reason_code
         FROM tasks WHERE id = ?`,
      ),
      startFacts: db.prepare<[string], TaskStartFacts>(
        'SELECT id, state, approved_at, started_at FROM tasks WHERE id = ?',
      ),
      reportFacts: db.prepare<[string], StateFactsRow & { outputs: string | null }>(
        `SELECT owner_id, state, desired, failure_reason, json_extract(reason, '$.code') AS reason_code,
           json_extract(spec, '$.outputs') AS outputs
         FROM tasks WHERE id = ?`,
      ),
      insert: db.prepare(
        `INSERT INTO tasks (id, proposal_id, revision_id, owner_id, spec, spec_digest, priority, state, desired, reason,
           failure_reason, exit_code, signal, approved_at, created_at, updated_at, started_at, finished_at)
         VALUES (@id, @proposal_id, @revision_id, @owner_id, @spec, @spec_digest, @priority, @state, @desired, @reason,
           @failure_reason, @exit_code, @signal, @approved_at, @created_at, @updated_at, @started_at, @finished_at)`,
      ),
      update: db.prepare(
        `UPDATE tasks SET state = @state, desired = @desired, reason = @reason,
           failure_reason = @failure_reason, exit_code = @exit_code, signal = @signal, updated_at = @updated_at,
           started_at = @started_at, finished_at = @finished_at
         WHERE id = @id AND state = @expected_state`,
      ),
      byState: db.prepare<[string], TaskRow>(
        'SELECT * FROM tasks WHERE state = ? ORDER BY priority DESC, approved_at, id',
      ),
      queued: db.prepare<[], Pick<QueuedTaskRow, 'id' | 'owner_id' | 'priority' | 'approved_at' | 'desired'>>(
        `SELECT id, owner_id, priority, approved_at, desired
         FROM tasks WHERE state = 'QUEUED' ORDER BY priority DESC, approved_at, id`,
      ),
      queuedOne: db.prepare<
        [string],
        Pick<QueuedTaskRow, 'id' | 'owner_id' | 'priority' | 'approved_at' | 'desired'>
      >(
        `SELECT id, owner_id, priority, approved_at, desired
         FROM tasks WHERE id = ? AND state = 'QUEUED'`,
      ),
      queuedSpec: db.prepare<
        [string],
        {
          runtime_kind: string;
          mounts: string | null;
          count: number;
          model: string | null;
          min_memory_mib: number | null;
          per_node: number | null;
          mig_profile: string | null;
          allow_mig: number | null;
          worker: string | null;
          limits: string | null;
          time_limit_seconds: number;
        }
      >(
        `SELECT json_extract(spec, '$.cards.count') AS count, json_extract(spec, '$.cards.model') AS model,
           json_extract(spec, '$.cards.min_memory_mib') AS min_memory_mib, json_extract(spec, '$.cards.per_node') AS per_node,
           json_extract(spec, '$.cards.mig_profile') AS mig_profile, json_extract(spec, '$.cards.allow_mig') AS allow_mig,
           json_extract(spec, '$.worker') AS worker, json_extract(spec, '$.limits') AS limits,
           json_extract(spec, '$.runtime.kind') AS runtime_kind, json_extract(spec, '$.mounts') AS mounts,
           json_extract(spec, '$.time_limit_seconds') AS time_limit_seconds
         FROM tasks WHERE id = ?`,
      ),
      countQueuedByOwner: db.prepare<[string], { n: number }>(
        "SELECT count(*) AS n FROM tasks WHERE owner_id = ? AND state = 'QUEUED'",
      ),
      countByState: db.prepare<[], { state: TaskState; n: number }>(
        'SELECT state, count(*) AS n FROM tasks GROUP BY state',
      ),
    };
  }

  /** Tasks of `account`'s principals that have not ended (an account holding them cannot be deleted). */
  countLiveOfAccount(account: string): number {
    const row = this.db
      .prepare<[string], { n: number }>(
        `SELECT count(*) AS n FROM tasks t JOIN principals p ON p.id = t.owner_id
          WHERE p.account = ? AND t.state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')`,
      )
      .get(account);
    return row?.n ?? 0;
  }

  /** The task with this id. */
  get(id: string): TaskRecord | undefined {
    const row = this.s.get.get(id);
    return row ? toTask(row) : undefined;
  }

  /** The task's state facts (see TaskStateFacts), without its spec. */
  stateFacts(id: string): TaskStateFacts | undefined {
    const r = this.s.stateFacts.get(id);
    return r === undefined ? undefined : toStateFacts(r);
  }

  /** A task's state and when it was approved and started, or undefined (src/http/metrics.ts). */
  startFacts(id: string): TaskStartFacts | undefined {
    return this.s.startFacts.get(id);
  }

  /** What an execution report reads of the task (see TaskReportFacts). */
  reportFacts(id: string): TaskReportFacts | undefined {
    const r = this.s.reportFacts.get(id);
    if (r === undefined) return undefined;
    const declared =
      r.outputs === null ? [] : (JSON.parse(r.outputs) as Array<{ path: string; required?: boolean }>);
    return {
      ...toStateFacts(r),
      outputs: declared.map((o) => ({ path: o.path, required: o.required ?? false })),
    };
  }

  /** Inserts a task. */
  insert(t: TaskRecord): void {
    this.written(t.id);
    this.s.insert.run(toRow(t));
  }

  /**
   * Compare-and-set update on the state column; false when another writer moved the task first. Only
   * the columns a move changes are bound: the spec is immutable, so it is not serialised again.
   */
  update(t: TaskRecord, expectedState: TaskState): boolean {
    this.written(t.id);
    return (
      this.s.update.run({
        id: t.id,
        state: t.state,
        desired: t.desired,
        reason: t.reason === null ? null : JSON.stringify(t.reason),
        failure_reason: t.failure_reason,
        exit_code: t.exit_code,
        signal: t.signal,
        updated_at: t.updated_at,
        started_at: t.started_at,
        finished_at: t.finished_at,
        expected_state: expectedState,
      }).changes === 1
    );
  }

  /** Tasks in one state, in scheduling order (priority, then approval time). */
  inState(state: TaskState): TaskRecord[] {
    return this.s.byState.all(state).map(toTask);
  }

  /**
   * The QUEUED tasks in scheduling order, reduced to what scheduling reads. Measured with 10,000 queued:
   * 70 ms per pass through `inState` (every spec parsed), a fraction of that here (docs/performance.md).
   *
   * Incremental (docs/performance.md "Noisy neighbours"): the queue read in full once, then only the rows written since (`dirty`),
   * each by primary key; a task's spec never changes once stored, so its spec part is read once while
   * it stays queued. Inside a transaction (whose writes may still roll back) it reads in full and keeps
   * nothing. `forgetQueued` makes the next read a full one (the scheduler's safety net).
   */
  queuedForScheduling(): QueuedTaskRow[] {
    if (this.db.inTransaction) return this.readQueuedInFull(this.queued ?? new Map());
    if (this.queued === null) {
      this.dirty.clear();
      this.queued = new Map(this.readQueuedInFull(new Map()).map((t) => [t.id, t]));
      this.queuedOrder = null;
    } else if (this.dirty.size > 0) {
      // A row that left the queue leaves the order as it was (filtered below); a new or changed row
      // sorts it again. An unchanged row stays the same object, so callers may cache by it.
      let left = false;
      for (const id of this.dirty) {
        const row = this.s.queuedOne.get(id);
        const held = this.queued.get(id);
        if (row === undefined) {
          if (held !== undefined) left = true;
          this.queued.delete(id);
          continue;
        }
        if (held !== undefined && sameQueuedRow(held, row)) continue;
        const part: QueuedSpecPart = held
          ? { spec: held.spec, runtime_kind: held.runtime_kind, mounts: held.mounts }
          : this.readQueuedSpec(id);
        this.queued.set(id, { ...row, ...part });
        this.queuedOrder = null;
      }
      this.dirty.clear();
      if (left && this.queuedOrder !== null) {
        const queued = this.queued;
        this.queuedOrder = this.queuedOrder.filter((r) => queued.get(r.id) === r);
      }
    }
    this.queuedOrder ??= [...this.queued.values()].sort(bySchedulingOrder);
    return [...this.queuedOrder];
  }

  /** Notes a write for the next `queuedForScheduling` (nothing to note while it will read in full). */
  private written(id: string): void {
    if (this.queued === null) return;
    this.dirty.add(id);
    if (this.dirty.size > MAX_DIRTY) this.forgetQueued();
  }

  /** Makes the next `queuedForScheduling` read the whole queue again. */
  forgetQueued(): void {
    this.queued = null;
    this.queuedOrder = null;
    this.dirty.clear();
  }

  /** Every QUEUED row from SQLite; spec parts taken from `known` where it has them. */
  private readQueuedInFull(known: ReadonlyMap<string, QueuedTaskRow>): QueuedTaskRow[] {
    return this.s.queued.all().map((t) => {
      const held = known.get(t.id);
      const part: QueuedSpecPart = held
        ? { spec: held.spec, runtime_kind: held.runtime_kind, mounts: held.mounts }
        : this.readQueuedSpec(t.id);
      return { ...t, ...part };
    });
  }

  /** The spec-derived part of a queued task's row (see queuedForScheduling). */
  private readQueuedSpec(id: string): QueuedSpecPart {
    const r = this.s.queuedSpec.get(id);
    if (r === undefined) throw new Error(`task ${id} vanished while being read`);
    return {
      runtime_kind: r.runtime_kind === 'container' ? 'container' : 'process',
      mounts: r.mounts === null ? [] : (JSON.parse(r.mounts) as string[]),
      spec: {
        cards: {
          count: r.count,
          ...(r.model === null ? {} : { model: r.model }),
          ...(r.min_memory_mib === null ? {} : { min_memory_mib: r.min_memory_mib }),
          ...(r.per_node === null ? {} : { per_node: r.per_node }),
          ...(r.mig_profile === null ? {} : { mig_profile: r.mig_profile }),
          ...(r.allow_mig === null ? {} : { allow_mig: r.allow_mig === 1 }),
        },
        ...(r.worker === null ? {} : { worker: r.worker }),
        ...(r.limits === null ? {} : { limits: JSON.parse(r.limits) as NonNullable<TaskSpec['limits']> }),
        time_limit_seconds: r.time_limit_seconds,
      },
    };
  }

  /** How many queued tasks an owner has. */
  countQueuedByOwner(ownerId: string): number {
    return this.s.countQueuedByOwner.get(ownerId)?.n ?? 0;
  }

  /** Task counts per state. */
  countByState(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const r of this.s.countByState.all()) out[r.state] = r.n;
    return out;
  }

  /** Lists tasks newest first with an id cursor. */
  list(q: TaskListQuery): TaskRecord[] {
    return selectNewestFirst<TaskRow>(this.db, 'tasks', q).map(toTask);
  }
}
