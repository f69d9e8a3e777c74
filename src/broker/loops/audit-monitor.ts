import { type AuditRetentionPolicy, archivePlan } from '../../domain/retention/audit-retention.js';
import type { Clock } from '../../platform/clock.js';
import type { Logger } from '../../platform/logger.js';
import type { ChainPoint } from '../../store/audit-repo.js';
import type { Store } from '../../store/store.js';
import type { AuditStatus } from '../ports.js';
import { AuditArchiveError, archiveSegment, deleteArchivedRows } from './audit-archive.js';

/**
 * Keeps the audit chain verified without blocking the master (docs/operations.md "Audit retention"). `/healthz`, `/status` and
 * `/metrics` read `status()`, the last result, in constant time. The work runs from `tick()`, which the
 * master calls on a timer:
 *
 * 1. incremental: re-check the anchor (the last verified row: still there, same hash, hash still
 *    matches its contents), then check only the rows appended since, in batches;
 * 2. full, every `full_interval_ms` (and first, when no full pass is remembered): walk the whole live
 *    chain from its start in batches; only a full pass clears a broken result;
 * 3. retention: archive the oldest verified rows the policy lets go (src/domain/retention/audit-retention.ts), as
 *    many segments as the plan says, yielding between them; a run that stopped at its cap with rows
 *    still due runs again on the next tick rather than after `retention_interval_ms` (docs/performance.md "Noisy neighbours").
 *
 * Between batches it yields to the event loop (`setImmediate` unless a test injects another), so a
 * request waits at most one batch. Passes never overlap. The anchor is saved in `audit_checkpoint`
 * so a restart continues where the last pass ended.
 */

/** Monitor settings (master config `audit`, plus the data dir for archive files). */
export interface AuditMonitorOptions {
  dataDir: string;
  batch_size: number;
  full_interval_ms: number;
  retention: AuditRetentionPolicy;
  /** How often retention runs at most. */
  retention_interval_ms: number;
  /** Yields to the event loop between batches; tests may count or delay. */
  yieldToLoop?: () => Promise<void>;
}

/** Resolves on the next turn of the event loop, after pending I/O callbacks. */
export const yieldToEventLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Background verifier of the audit chain; see the file comment. */
export class AuditMonitor {
  private anchor: ChainPoint;
  private result: AuditStatus;
  /** A failure stays reported until a full pass succeeds. */
  private broken: AuditStatus | null = null;
  private fullAt: number | null;
  private lastRetention = 0;
  /** The last retention run stopped at its cap with rows still due: the next tick continues. */
  private retentionBehind = false;
  private running: Promise<void> | null = null;
  private stopped = false;
  private readonly yieldToLoop: () => Promise<void>;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly opts: AuditMonitorOptions,
    private readonly logger?: Logger,
  ) {
    this.yieldToLoop = opts.yieldToLoop ?? yieldToEventLoop;
    const start = store.audit.liveStart();
    const saved = store.audit.checkpoint();
    this.anchor =
      saved && saved.verified_seq > start.seq
        ? { seq: saved.verified_seq, hash: saved.verified_hash }
        : start;
    this.fullAt = saved?.full_at ?? null;
    this.result = { ok: true, events: this.anchor.seq - start.seq, detail: 'verification pending' };
  }

  /** The last result, in constant time. */
  status(): AuditStatus {
    return this.broken ?? this.result;
  }

  /** The last verified row. */
  verifiedThrough(): ChainPoint {
    return this.anchor;
  }

  /** True while a pass or an archive run is in progress. */
  busy(): boolean {
    return this.running !== null;
  }

  /** Resolves once no pass is running (before closing the store). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  /**
   * Stops for good: a pass in progress ends at its next batch boundary without a result (a full pass
   * over a long chain would otherwise hold shutdown for seconds), and later ticks do nothing.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.idle();
  }

  /**
   * One scheduled step: a full pass when due, else an incremental one; then retention when due.
   * A tick while the previous is still running does nothing (and resolves with it).
   */
  tick(): Promise<void> {
    if (this.running) return this.running;
    if (this.stopped) return Promise.resolve();
    const run = async () => {
      const now = this.clock.now();
      if (this.fullAt === null || now - this.fullAt >= this.opts.full_interval_ms) await this.walk('full');
      else await this.walk('incremental');
      const due = this.retentionBehind || now - this.lastRetention >= this.opts.retention_interval_ms;
      if (this.broken === null && due) {
        this.lastRetention = now;
        await this.applyRetention(now);
      }
    };
    return this.serialise(run);
  }

  /** A full pass on demand, waiting for any pass in progress first. */
  async verifyAll(): Promise<AuditStatus> {
    while (this.running) await this.running;
    await this.serialise(() => this.walk('full'));
    return this.status();
  }

  /** An incremental pass on demand, waiting for any pass in progress first. */
  async checkNew(): Promise<AuditStatus> {
    while (this.running) await this.running;
    await this.serialise(() => this.walk('incremental'));
    return this.status();
  }

  private serialise(fn: () => Promise<void>): Promise<void> {
    const p = fn()
      .catch((err: unknown) => this.logger?.error({ err }, 'audit check failed'))
      .finally(() => {
        this.running = null;
      });
    this.running = p;
    return p;
  }

  private async walk(kind: 'full' | 'incremental'): Promise<void> {
    const audit = this.store.audit;
    const start = audit.liveStart();
    let point: ChainPoint;
    if (kind === 'full') point = start;
    else {
      const problem = audit.checkAnchor(this.anchor);
      if (problem) return this.fail(this.anchor.seq, problem);
      point = this.anchor;
    }
    for (;;) {
      const b = audit.verifyBatch(point, this.opts.batch_size);
      if (!b.ok) return this.fail(b.first_bad_seq, b.problem);
      point = b.through;
      if (b.done) break;
      await this.yieldToLoop();
      if (this.stopped) return;
    }
    if (point.seq < this.anchor.seq)
      return this.fail(
        point.seq + 1,
        `rows ${point.seq + 1}..${this.anchor.seq} were verified before and are gone`,
      );
    const now = this.clock.now();
    if (kind === 'full') {
      this.fullAt = now;
      this.broken = null;
    }
    this.anchor = point;
    this.result = { ok: true, events: point.seq - start.seq };
    audit.saveCheckpoint({
      verified_seq: point.seq,
      verified_hash: point.hash,
      verified_at: now,
      full_at: kind === 'full' ? now : null,
    });
  }

  private fail(seq: number, problem: string): void {
    const start = this.store.audit.liveStart();
    this.broken = { ok: false, events: Math.max(0, seq - 1 - start.seq), detail: `seq ${seq}: ${problem}` };
    this.logger?.error({ seq, problem }, 'audit chain broken');
  }

  private async applyRetention(now: number): Promise<void> {
    const audit = this.store.audit;
    await deleteArchivedRows(this.store, this.yieldToLoop); // rows a crash left between batches
    const plan = archivePlan(
      {
        archived_through: audit.liveStart().seq,
        head_seq: audit.head()?.seq ?? 0,
        verified_seq: this.anchor.seq,
        newest_old_enough: audit.lastSeqBefore(now - this.opts.retention.min_age_seconds * 1000),
      },
      this.opts.retention,
    );
    this.retentionBehind = false;
    for (const through of plan.through) {
      if (this.stopped) return;
      let segment: Awaited<ReturnType<typeof archiveSegment>>;
      try {
        segment = await archiveSegment(this.store, this.opts.dataDir, through, now, this.yieldToLoop);
      } catch (err) {
        if (err instanceof AuditArchiveError) return this.fail(err.seq, err.problem);
        throw err;
      }
      this.result = { ok: true, events: this.anchor.seq - segment.last_seq };
      this.logger?.info(
        { first_seq: segment.first_seq, last_seq: segment.last_seq, file: segment.file },
        'audit segment archived',
      );
      await this.yieldToLoop();
    }
    this.retentionBehind = plan.more;
  }

  /** Whether the last retention run left rows due (it continues on the next tick). */
  retentionIsBehind(): boolean {
    return this.retentionBehind;
  }
}
