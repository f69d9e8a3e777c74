import { AccountsRepo } from './accounts-repo.js';
import { AuditRepo } from './audit-repo.js';
import { BlobsRepo } from './blobs-repo.js';
import { type Db, openDb } from './db.js';
import { EscalationsRepo } from './escalations-repo.js';
import { GrantsRepo } from './grants-repo.js';
import { IdempotencyRepo } from './idempotency-repo.js';
import { LeasesRepo } from './leases-repo.js';
import { LogsRepo } from './logs-repo.js';
import { OutboxRepo } from './outbox-repo.js';
import { PreemptionsRepo } from './preemptions-repo.js';
import { PrincipalsRepo } from './principals-repo.js';
import { ProposalsRepo } from './proposals-repo.js';
import { QualificationRepo } from './qualification-repo.js';
import { describeStorageError, isStorageWriteError, storageUnavailable } from './storage-errors.js';
import { TasksRepo } from './tasks-repo.js';
import { UsageRepo } from './usage-repo.js';
import { WorkersRepo } from './workers-repo.js';

/**
 * The master's store: one SQLite connection and its repositories. `transaction` runs a function
 * atomically (better-sqlite3 is synchronous, so read → decide → write cannot interleave with another
 * request); callbacks registered with `afterCommit` run only once the outermost transaction committed,
 * which is when notifications (wake waiters, send worker messages) may go out.
 */
export class Store {
  readonly principals: PrincipalsRepo;
  readonly proposals: ProposalsRepo;
  readonly tasks: TasksRepo;
  readonly idempotency: IdempotencyRepo;
  readonly audit: AuditRepo;
  readonly workers: WorkersRepo;
  readonly leases: LeasesRepo;
  readonly logs: LogsRepo;
  readonly outbox: OutboxRepo;
  readonly qualifications: QualificationRepo;
  readonly blobs: BlobsRepo;
  readonly grants: GrantsRepo;
  readonly escalations: EscalationsRepo;
  readonly accounts: AccountsRepo;
  readonly usage: UsageRepo;
  readonly preemptions: PreemptionsRepo;
  private pending: Array<() => void> = [];
  private atEnd: Array<() => void> = [];
  private depth = 0;
  /**
   * better-sqlite3's transaction wrapper, made once: `db.transaction(fn)` builds five wrapper functions
   * on every call, about a third of the CPU of a short transaction and more of a savepoint (a worker
   * report runs in four nested ones; docs/performance.md "e2e"). Nested calls become savepoints as before.
   */
  private readonly inTransaction: (fn: () => unknown) => unknown;
  /**
   * Called with a description whenever a write fails for lack of space or a failing disk (the storage
   * guard listens: src/broker/loops/storage-guard.ts).
   */
  onWriteFailure: (detail: string) => void = () => undefined;

  constructor(readonly db: Db) {
    this.inTransaction = db.transaction((fn: () => unknown) => fn());
    this.principals = new PrincipalsRepo(db);
    this.proposals = new ProposalsRepo(db);
    this.tasks = new TasksRepo(db);
    this.idempotency = new IdempotencyRepo(db);
    this.audit = new AuditRepo(db);
    this.workers = new WorkersRepo(db);
    this.leases = new LeasesRepo(db);
    this.logs = new LogsRepo(db);
    this.outbox = new OutboxRepo(db);
    this.qualifications = new QualificationRepo(db);
    this.blobs = new BlobsRepo(db);
    this.grants = new GrantsRepo(db);
    this.escalations = new EscalationsRepo(db);
    this.accounts = new AccountsRepo(db);
    this.usage = new UsageRepo(db);
    this.preemptions = new PreemptionsRepo(db);
  }

  /** Opens the database file (or `:memory:`) and migrates it. */
  static open(path: string): Store {
    return new Store(openDb(path));
  }

  /** Runs `fn` in a transaction (a savepoint when nested); after-commit callbacks run on success. */
  transaction<T>(fn: () => T): T {
    if (this.depth === 0) this.audit.holdHead(true);
    this.depth++;
    const mark = this.pending.length;
    let result: T;
    try {
      result = this.inTransaction(fn) as T;
    } catch (err) {
      this.depth--;
      // Rows appended by the part that rolled back are gone: the next append reads the head again.
      this.audit.forgetHead();
      if (this.depth === 0) this.audit.holdHead(false);
      // Callbacks registered by the part that rolled back must never run.
      this.pending.length = mark;
      this.runAtEnd();
      // SQLITE_FULL / I/O errors become a retryable UNAVAILABLE at every edge (ADR 0016).
      if (isStorageWriteError(err)) {
        const detail = describeStorageError(err);
        this.onWriteFailure(detail);
        throw storageUnavailable(detail);
      }
      throw err;
    }
    this.depth--;
    if (this.depth === 0) {
      this.audit.holdHead(false);
      const callbacks = this.pending;
      this.pending = [];
      for (const cb of callbacks) cb();
    }
    this.runAtEnd();
    return result;
  }

  /**
   * Runs `cb` in a transaction of its own once the outermost transaction ends, committed or rolled
   * back: for a record that must outlive a refusal (an agent reviewer's approval refused with
   * NEEDS_PERSON still flags the proposal for a person). Runs now if none is open.
   */
  afterOutermost(cb: () => void): void {
    if (this.depth === 0) this.transaction(cb);
    else this.atEnd.push(cb);
  }

  private runAtEnd(): void {
    if (this.depth !== 0 || this.atEnd.length === 0) return;
    const callbacks = this.atEnd;
    this.atEnd = [];
    for (const cb of callbacks) {
      try {
        this.transaction(cb);
      } catch {
        // The refusal that registered it stands either way; only its trace is lost (a full disk).
      }
    }
  }

  /** Defers `cb` until the current outermost transaction commits (runs now if none is open). */
  afterCommit(cb: () => void): void {
    if (this.depth === 0) cb();
    else this.pending.push(cb);
  }

  /**
   * One small write (the `storage_probe` row): whether the store takes writes again after a failure.
   * Throws UNAVAILABLE (through `transaction`) while it does not.
   */
  probeWrite(now: number): void {
    this.transaction(() => {
      this.db
        .prepare(
          'INSERT INTO storage_probe (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at',
        )
        .run(now);
    });
  }

  /** Closes the database. */
  close(): void {
    this.db.close();
  }
}
