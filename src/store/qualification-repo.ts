import type { QualificationRunState } from '../domain/machines/qualification-run.js';
import type { SkippedRung, SpanRung } from '../domain/qualification/ladder.js';
import type { Db } from './db.js';

/** Who plays the submitter: the built-in MCP client, or a real coding-agent CLI. */
export type SubmitterKind = 'scripted' | 'claude' | 'codex';

/** A qualification run row. */
export interface QualificationRunRecord {
  id: string;
  worker_id: string;
  state: QualificationRunState;
  submitter_kind: SubmitterKind;
  requested_by: string;
  submitter_id: string;
  reviewer_id: string;
  requested: number[];
  ladder: number[];
  /** A Slurm pool's two-node rung, run after the ladder; null when there is none (migration 010). */
  span: SpanRung | null;
  skipped: SkippedRung[];
  reserved_cards: number[];
  evidence: Record<string, unknown> | null;
  digest: string | null;
  detail: string | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
}

/** One progress line. */
export interface QualificationStep {
  seq: number;
  at: number;
  cards: number | null;
  text: string;
}

type JsonColumns = 'requested' | 'ladder' | 'span' | 'skipped' | 'reserved_cards' | 'evidence';
type RunRow = Omit<QualificationRunRecord, JsonColumns> & Record<JsonColumns, string | null>;

function toRun(r: RunRow): QualificationRunRecord {
  const json = <T>(v: string | null, fallback: T): T => (v === null ? fallback : (JSON.parse(v) as T));
  return {
    ...r,
    requested: json(r.requested, []),
    ladder: json(r.ladder, []),
    span: json(r.span, null),
    skipped: json(r.skipped, []),
    reserved_cards: json(r.reserved_cards, []),
    evidence: json(r.evidence, null),
  };
}

/** Qualification runs and their steps. */
export class QualificationRepo {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      insert: db.prepare(
        `INSERT INTO qualification_runs (id, worker_id, state, submitter_kind, requested_by, submitter_id, reviewer_id,
           requested, ladder, span, skipped, reserved_cards, evidence, digest, detail, created_at, updated_at, finished_at)
         VALUES (@id, @worker_id, @state, @submitter_kind, @requested_by, @submitter_id, @reviewer_id,
           @requested, @ladder, @span, @skipped, @reserved_cards, @evidence, @digest, @detail, @created_at, @updated_at, @finished_at)`,
      ),
      get: db.prepare<[string], RunRow>('SELECT * FROM qualification_runs WHERE id = ?'),
      running: db.prepare<[], RunRow>("SELECT * FROM qualification_runs WHERE state = 'RUNNING' ORDER BY id"),
      recent: db.prepare<[string, number], RunRow>(
        'SELECT * FROM qualification_runs WHERE id < ? ORDER BY id DESC LIMIT ?',
      ),
      runningOn: db.prepare<[string], RunRow>(
        "SELECT * FROM qualification_runs WHERE state = 'RUNNING' AND worker_id = ?",
      ),
      update: db.prepare(
        `UPDATE qualification_runs SET state = @state, evidence = @evidence, digest = @digest, detail = @detail,
           updated_at = @updated_at, finished_at = @finished_at WHERE id = @id AND state = @expected`,
      ),
      nextSeq: db.prepare<[string], { seq: number }>(
        'SELECT coalesce(max(seq), 0) + 1 AS seq FROM qualification_steps WHERE run_id = ?',
      ),
      addStep: db.prepare(
        'INSERT INTO qualification_steps (run_id, seq, at, cards, text) VALUES (?, ?, ?, ?, ?)',
      ),
      steps: db.prepare<[string, number], QualificationStep>(
        'SELECT seq, at, cards, text FROM qualification_steps WHERE run_id = ? AND seq > ? ORDER BY seq',
      ),
    };
  }

  /** Inserts a new RUNNING run. */
  insert(r: QualificationRunRecord): void {
    this.s.insert.run({
      ...r,
      requested: JSON.stringify(r.requested),
      ladder: JSON.stringify(r.ladder),
      span: r.span === null ? null : JSON.stringify(r.span),
      skipped: JSON.stringify(r.skipped),
      reserved_cards: JSON.stringify(r.reserved_cards),
      evidence: r.evidence === null ? null : JSON.stringify(r.evidence),
    });
  }

  /** One run. */
  get(id: string): QualificationRunRecord | undefined {
    const r = this.s.get.get(id);
    return r ? toRun(r) : undefined;
  }

  /** Runs newest first, before the cursor id. */
  recent(beforeId: string | undefined, limit: number): QualificationRunRecord[] {
    return this.s.recent.all(beforeId ?? '\uffff', limit).map(toRun);
  }

  /** Runs still RUNNING (their reservations are live). */
  running(): QualificationRunRecord[] {
    return this.s.running.all().map(toRun);
  }

  /** The RUNNING run on a worker, if any. */
  runningOn(workerId: string): QualificationRunRecord | undefined {
    const r = this.s.runningOn.get(workerId);
    return r ? toRun(r) : undefined;
  }

  /**
   * Writes a moved run (state, evidence, digest, detail, timestamps) if its stored state is still
   * `expected` (compare-and-set); false when another writer moved it first. Only `moveQualificationRun`
   * calls this; the table allows no move out of a final state, so a verdict never changes afterwards.
   */
  update(next: QualificationRunRecord, expected: QualificationRunState): boolean {
    return (
      this.s.update.run({
        id: next.id,
        state: next.state,
        evidence: next.evidence === null ? null : JSON.stringify(next.evidence),
        digest: next.digest,
        detail: next.detail,
        updated_at: next.updated_at,
        finished_at: next.finished_at,
        expected,
      }).changes === 1
    );
  }

  /** Appends a progress line; returns its sequence number. */
  addStep(runId: string, at: number, cards: number | null, text: string): number {
    const seq = this.s.nextSeq.get(runId)?.seq ?? 1;
    this.s.addStep.run(runId, seq, at, cards, text);
    return seq;
  }

  /** Progress lines after `afterSeq`, in order. */
  steps(runId: string, afterSeq = 0): QualificationStep[] {
    return this.s.steps.all(runId, afterSeq);
  }
}
