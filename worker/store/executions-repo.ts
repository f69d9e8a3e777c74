import type {
  ExecutionPlan,
  FailureReason,
  OutputRecord,
  SlurmJobReport,
} from '../../src/contracts/worker-protocol.js';
import { ExecutionPlanSchema } from '../../src/contracts/worker-protocol.js';
import type { ReportedPhase } from '../../src/domain/machines/execution.js';
import type { LocalDb } from './db.js';
import { ExecutionMoveError, moveRecordedPhase } from './local-store-moves.js';

/**
 * What the worker knows about each execution (`executions`): phase, plan, outcome, process group id,
 * Slurm job, and when its directory was pruned. The TSDoc of each method is on `LocalStore`.
 */

/** What the worker keeps of an execution's outcome (the bytes of outputs are not kept here). */
export interface ExecutionSummary {
  readonly exit_code: number | null;
  readonly signal: string | null;
  readonly failure_reason: FailureReason | null;
  readonly outputs: readonly OutputRecord[];
  readonly cleaned?: boolean;
  readonly detail?: string;
}

/** A process for good: its start time (clock ticks since boot) and the boot id it started in. */
export interface ProcessIdentity {
  readonly start: string;
  readonly boot: string;
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
  /** Who the group's leader was: its start time and the boot it started in; null when unknown. */
  readonly pgid_identity: ProcessIdentity | null;
  /** Slurm workers: the job behind it as last seen (job id, state, pending reason, binding); else null. */
  readonly slurm: SlurmJobReport | null;
  readonly created_at: number;
  readonly updated_at: number;
}

interface ExecutionRow {
  execution_id: string;
  task_id: string;
  lease_epoch: number;
  phase: ReportedPhase;
  plan_json: string;
  result_json: string | null;
  pgid: number | null;
  pgid_start: string | null;
  pgid_boot: string | null;
  slurm_json: string | null;
  created_at: number;
  updated_at: number;
}

function prepareExecutions(db: LocalDb) {
  return {
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
    getPhase: db.prepare<[string], { phase: ReportedPhase }>(
      'SELECT phase FROM executions WHERE execution_id = ?',
    ),
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
    setPgid: db.prepare<[number, string | null, string | null, number, string]>(
      'UPDATE executions SET pgid = ?, pgid_start = ?, pgid_boot = ?, updated_at = ? WHERE execution_id = ?',
    ),
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
  };
}

/**
 * How many parsed plans the store keeps in memory. A plan never changes once recorded, and every phase
 * move reads its record back: without the cache each move re-validated the whole plan with zod (docs/performance.md
 * "Noisy neighbours"). Far above the executions a worker has unfinished at once (one per card).
 */
const PLAN_CACHE_SIZE = 1024;

/**
 * Parsed plans by the exact JSON they were parsed from: a row whose `plan_json` differs from the cached
 * text (a file edited or restored underneath) is parsed again, so the cache never hides a damaged plan.
 */
function planCache(size: number) {
  const plans = new Map<string, { readonly json: string; readonly plan: ExecutionPlan }>();
  return (id: string, json: string): ExecutionPlan => {
    const hit = plans.get(id);
    if (hit !== undefined && hit.json === json) return hit.plan;
    // Parsed, not cast: a damaged file must fail loudly rather than hand the worker a bad plan.
    const plan = ExecutionPlanSchema.parse(JSON.parse(json));
    plans.delete(id);
    plans.set(id, { json, plan });
    if (plans.size > size) plans.delete(plans.keys().next().value!);
    return plan;
  };
}

/** The execution methods of `LocalStore`, over `db`. */
export function executionsRepo(db: LocalDb, now: () => number) {
  const stmts = prepareExecutions(db);
  const parsePlan = planCache(PLAN_CACHE_SIZE);
  const toRecord = (row: ExecutionRow): ExecutionRecord => toExecutionRecord(row, parsePlan);
  const getExecution = (id: string): ExecutionRecord | null => {
    const row = stmts.getExecution.get(id);
    return row === undefined ? null : toRecord(row);
  };
  const storedPhase = (id: string): ReportedPhase | null => stmts.getPhase.get(id)?.phase ?? null;

  const recordExecution = db.transaction(
    (plan: ExecutionPlan, phase: ReportedPhase, result: ExecutionSummary | undefined): ExecutionRecord => {
      moveRecordedPhase(plan.execution_id, 'assigned', phase, storedPhase(plan.execution_id));
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
      moveRecordedPhase(id, from, to, storedPhase(id));
      const json = result === undefined ? null : JSON.stringify(result);
      // Compare-and-set on the phase read above: a concurrent writer makes this a CONFLICT, not a jump.
      if (stmts.moveExecution.run(to, json, now(), id, from).changes !== 1)
        throw new ExecutionMoveError('CONFLICT', id, from, to);
      return getExecution(id)!;
    },
  );

  return {
    recordExecution: (
      plan: ExecutionPlan,
      phase: 'accepted' | 'rejected',
      result?: ExecutionSummary,
    ): ExecutionRecord => recordExecution.immediate(plan, phase, result),
    moveExecution: (
      id: string,
      from: ReportedPhase,
      to: ReportedPhase,
      result?: ExecutionSummary,
    ): ExecutionRecord => moveExecution.immediate(id, from, to, result),
    setExecutionPgid: (executionId: string, pgid: number, identity: ProcessIdentity | null = null): void => {
      stmts.setPgid.run(pgid, identity?.start ?? null, identity?.boot ?? null, now(), executionId);
    },
    setExecutionSlurm: (executionId: string, slurm: SlurmJobReport): void => {
      stmts.setSlurm.run(JSON.stringify(slurm), now(), executionId);
    },
    getExecution,
    listUnfinishedExecutions: (): ExecutionRecord[] => stmts.unfinished.all().map(toRecord),
    listKnownExecutions: (limit: number): ExecutionRecord[] => stmts.known.all(limit).map(toRecord),
    listPrunableExecutionDirs: (before: number, keep: number, limit: number): string[] =>
      stmts.prunableDirs.all(keep, before, limit).map((r) => r.execution_id),
    markExecutionDirPruned: (id: string): void => {
      stmts.markDirPruned.run(now(), id);
    },
  };
}

function toExecutionRecord(
  row: ExecutionRow,
  parsePlan: (id: string, json: string) => ExecutionPlan,
): ExecutionRecord {
  return {
    execution_id: row.execution_id,
    task_id: row.task_id,
    lease_epoch: row.lease_epoch,
    phase: row.phase,
    plan: parsePlan(row.execution_id, row.plan_json),
    result: row.result_json === null ? null : (JSON.parse(row.result_json) as ExecutionSummary),
    pgid: row.pgid,
    pgid_identity:
      row.pgid_start === null || row.pgid_boot === null
        ? null
        : { start: row.pgid_start, boot: row.pgid_boot },
    slurm: row.slurm_json == null ? null : (JSON.parse(row.slurm_json) as SlurmJobReport),
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}
