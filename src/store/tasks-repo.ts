import type { TaskSpec } from '../contracts/task-spec.js';
import type { TaskState } from '../domain/task.js';
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
  spec: Pick<TaskSpec, 'cards' | 'worker'>;
  /** The spec's `runtime.kind`: container tasks need a worker with a container engine. */
  runtime_kind: TaskSpec['runtime']['kind'];
  /** The spec's named data mounts: only workers offering all of them may take it. */
  mounts: string[];
}

/** The part of a QueuedTaskRow taken from the (immutable) spec. */
type QueuedSpecPart = Pick<QueuedTaskRow, 'spec' | 'runtime_kind' | 'mounts'>;

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
  /** The spec-derived parts of the tasks queued at the last pass, by task id (queuedForScheduling). */
  private queuedSpecs = new Map<string, QueuedSpecPart>();

  constructor(private readonly db: Db) {
    this.s = {
      get: db.prepare<[string], TaskRow>('SELECT * FROM tasks WHERE id = ?'),
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
      queuedSpec: db.prepare<
        [string],
        {
          runtime_kind: string;
          mounts: string | null;
          count: number;
          model: string | null;
          min_memory_mib: number | null;
          per_node: number | null;
          worker: string | null;
        }
      >(
        `SELECT json_extract(spec, '$.cards.count') AS count, json_extract(spec, '$.cards.model') AS model,
           json_extract(spec, '$.cards.min_memory_mib') AS min_memory_mib, json_extract(spec, '$.cards.per_node') AS per_node,
           json_extract(spec, '$.worker') AS worker,
           json_extract(spec, '$.runtime.kind') AS runtime_kind, json_extract(spec, '$.mounts') AS mounts
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

  /** The task with this id. */
  get(id: string): TaskRecord | undefined {
    const row = this.s.get.get(id);
    return row ? toTask(row) : undefined;
  }

  /** Inserts a task. */
  insert(t: TaskRecord): void {
    this.s.insert.run(toRow(t));
  }

  /** Compare-and-set update on the state column; false when another writer moved the task first. */
  update(t: TaskRecord, expectedState: TaskState): boolean {
    return this.s.update.run({ ...toRow(t), expected_state: expectedState }).changes === 1;
  }

  /** Tasks in one state, in scheduling order (priority, then approval time). */
  inState(state: TaskState): TaskRecord[] {
    return this.s.byState.all(state).map(toTask);
  }

  /**
   * The QUEUED tasks in scheduling order, reduced to what scheduling reads. Measured with 10,000 queued:
   * 70 ms per pass through `inState` (every spec parsed), a fraction of that here (docs/performance.md).
   */
  queuedForScheduling(): QueuedTaskRow[] {
    // A task's spec never changes once stored, so what a pass needs of it is read once per task and
    // kept while the task is queued (issue 21: the json_extracts of every queued task on every pass
    // were most of a pass with a deep queue). Only the few mutable columns are read each time.
    const memo = new Map<string, QueuedSpecPart>();
    const rows = this.s.queued.all().map((t) => {
      const part = this.queuedSpecs.get(t.id) ?? this.readQueuedSpec(t.id);
      memo.set(t.id, part);
      return { ...t, ...part };
    });
    this.queuedSpecs = memo;
    return rows;
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
        },
        ...(r.worker === null ? {} : { worker: r.worker }),
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
