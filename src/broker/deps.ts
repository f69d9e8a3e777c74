import type { Clock } from '../platform/clock.js';
import type { MasterConfig } from '../platform/config.js';
import type { IdGenerator } from '../platform/ids.js';
import type { Logger } from '../platform/logger.js';
import type { Store } from '../store/store.js';
import type { Notifier } from './notifier.js';
import type { PlacementLookup } from './views.js';

/** Everything a use case needs, passed as one plain object (no DI container). */
export interface BrokerDeps {
  store: Store;
  clock: Clock;
  ids: IdGenerator;
  config: MasterConfig;
  notifier: Notifier;
  logger: Logger;
  /** Where a task runs (from its lease); wired by the scheduling module. */
  placement: PlacementLookup;
}
