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
      queued: db.prepare<
        [],
        Omit<QueuedTaskRow, 'spec' | 'runtime_kind' | 'mounts'> & {
          runtime_kind: string;
          mounts: string | null;
          count: number;
          model: string | null;
          min_memory_mib: number | null;
          per_node: number | null;
          worker: string | null;
        }
      >(
        `SELECT id, owner_id, priority, approved_at, desired,
           json_extract(spec, '$.cards.count') AS count, json_extract(spec, '$.cards.model') AS model,
           json_extract(spec, '$.cards.min_memory_mib') AS min_memory_mib, json_extract(spec, '$.cards.per_node') AS per_node,
           json_extract(spec, '$.worker') AS worker,
           json_extract(spec, '$.runtime.kind') AS runtime_kind, json_extract(spec, '$.mounts') AS mounts
         FROM tasks WHERE state = 'QUEUED' ORDER BY priority DESC, approved_at, id`,
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
    return this.s.queued
      .all()
      .map(({ count, model, min_memory_mib, per_node, worker, runtime_kind, mounts, ...t }) => ({
        ...t,
        runtime_kind: runtime_kind === 'container' ? 'container' : 'process',
        mounts: mounts === null ? [] : (JSON.parse(mounts) as string[]),
        spec: {
          cards: {
            count,
            ...(model === null ? {} : { model }),
            ...(min_memory_mib === null ? {} : { min_memory_mib }),
            ...(per_node === null ? {} : { per_node }),
          },
          ...(worker === null ? {} : { worker }),
        },
      }));
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
