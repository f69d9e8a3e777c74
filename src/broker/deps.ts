import type { Clock } from '../platform/clock.js';
import type { MasterConfig } from '../platform/config.js';
import type { IdGenerator } from '../platform/ids.js';
import type { Logger } from '../platform/logger.js';
import type { Store } from '../store/store.js';
import type { BrokerEvents } from './events.js';
import type { Fleet } from './fleet.js';
import type { Notifier } from './notifier.js';
import type { AuditStatus, QualificationLauncher, StorageGate, TaskObserver, WorkerLink } from './ports.js';
import type { BrokerRuntime } from './runtime.js';

/** Everything a use case needs, passed as one plain object (no DI container). */
export interface BrokerDeps {
  store: Store;
  clock: Clock;
  ids: IdGenerator;
  config: MasterConfig;
  notifier: Notifier;
  /** Typed events for the metrics (review decisions), beside the notifier's data-free topics. */
  events: BrokerEvents;
  logger: Logger;
  /** Derived task facts (placement, queue reason and position), owned by the scheduler. */
  observe: TaskObserver;
  /** Workers: live sessions and samples, the outbox link, and the scheduler's trigger. */
  cluster: ClusterRuntime;
  /** The master's in-memory caches, shares and work under way (src/broker/runtime.ts); one per master. */
  runtime: BrokerRuntime;
  /** The audit chain's integrity: the background monitor's last result, in constant time. */
  auditStatus: () => AuditStatus;
  /**
   * The disk guard (free space, SQLITE_FULL): refuses growth with UNAVAILABLE while the store cannot
   * take it. Absent in unit fixtures, where nothing is refused.
   */
  storage?: StorageGate;
  /** Starts qualification runs in the background; absent where no master listens (unit fixtures). */
  qualification?: QualificationLauncher;
}

/** The live half of the cluster that use cases need. */
export interface ClusterRuntime {
  fleet: Fleet;
  link: WorkerLink;
  requestPass(): void;
  /** Tasks whose grants failed to apply repeatedly (the scheduler's backoff; for get_status). */
  failingGrants(): ReadonlyArray<{ task_id: string; failures: number; retry_at: number; error: string }>;
}
