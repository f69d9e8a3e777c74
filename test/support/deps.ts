import type { BrokerDeps } from '../../src/broker/deps.js';
import { BrokerEvents } from '../../src/broker/events.js';
import { Fleet } from '../../src/broker/fleet.js';
import { Notifier } from '../../src/broker/notifier.js';
import { createPrincipal } from '../../src/broker/principals.js';
import { createBrokerRuntime } from '../../src/broker/runtime.js';
import { brokerTools } from '../../src/broker/tools/catalog.js';
import { type BoundTool, invokeTool } from '../../src/broker/tools/dispatch.js';
import { type Clock, ManualClock } from '../../src/platform/clock.js';
import type { MasterConfigInput } from '../../src/platform/config.js';
import { createIdGenerator } from '../../src/platform/ids.js';
import { silentLogger } from '../../src/platform/logger.js';
import type { Principal, Role } from '../../src/store/principals-repo.js';
import { Store } from '../../src/store/store.js';
import { testConfig } from './master.js';

/**
 * Broker use cases without HTTP: a real SQLite store in memory, a ManualClock by default, the test
 * policy, and `invoke(principal, tool, input)` through the same dispatcher MCP and REST use (role check,
 * input parse, idempotency in one transaction).
 */

/** Options of {@link makeBrokerDeps}. */
export interface BrokerFixtureOptions {
  config?: MasterConfigInput;
  clock?: Clock;
  /** Database path; default `:memory:`. */
  dbPath?: string;
}

/** Deps for use-case tests and helpers around them. */
export interface BrokerFixture {
  deps: BrokerDeps;
  /** The clock in `deps` (a ManualClock unless one was passed). */
  clock: Clock;
  /** How often a use case asked for a scheduling pass (`deps.cluster.requestPass`). */
  passesRequested(): number;
  /** Worker ids whose outbox a use case asked to flush, in order. */
  flushed: string[];
  /** Creates a principal; returns it (tokens are not needed without HTTP). */
  principal(name: string, roles: Role[]): Principal;
  /** Calls a tool through the dispatcher; resolves to its output, rejects with BrokerError. */
  invoke(principal: Principal, tool: string, input: Record<string, unknown>): Promise<unknown>;
  close(): void;
}

/** Builds deps on an in-memory store (close it when done). */
export function makeBrokerDeps(opts: BrokerFixtureOptions = {}): BrokerFixture {
  const clock = opts.clock ?? new ManualClock();
  const config = testConfig(opts.config);
  const ids = createIdGenerator();
  const store = Store.open(opts.dbPath ?? ':memory:');
  let passes = 0;
  const flushed: string[] = [];
  const deps: BrokerDeps = {
    store,
    clock,
    ids,
    config,
    notifier: new Notifier(),
    events: new BrokerEvents(),
    logger: silentLogger(),
    // No scheduler here: tasks have no placement and no computed queue position.
    observe: { placement: () => null, queueInfo: () => null },
    cluster: {
      fleet: new Fleet(config.timing.worker_offline_seconds * 1000, clock.now()),
      link: { bootId: ids('boot'), flush: (w) => flushed.push(w) },
      requestPass: () => {
        passes++;
      },
      failingGrants: () => [],
    },
    runtime: createBrokerRuntime(config),
    auditStatus: () => {
      const v = store.audit.verify();
      return v.ok
        ? { ok: true, events: v.events }
        : { ok: false, events: v.events, detail: `seq ${v.first_bad_seq}: ${v.problem}` };
    },
  };
  const tools = new Map<string, BoundTool>(brokerTools().map((t) => [t.def.name, t]));
  return {
    deps,
    clock,
    passesRequested: () => passes,
    flushed,
    principal: (name, roles) => createPrincipal(deps, { name, roles }, 'test').principal,
    invoke(principal, name, input) {
      const tool = tools.get(name);
      if (!tool) throw new Error(`no tool ${name}`);
      return invokeTool(tool, { deps, principal }, input);
    },
    close: () => deps.store.close(),
  };
}
