import { afterEach, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { BACKFILL_MARGIN_SECONDS } from '../../../../src/domain/scheduling/decide.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';

/**
 * The margin a backfilled task is charged beyond its time limit (ADR 0049) in the real Scheduler: its
 * start-up, the kill grace and its cleanup, which the worker may take up to `cleanup_timeout_seconds`
 * for. An operator who raises the cleanup timeout must not let a backfilled task's cleanup outlast the
 * shadow it was promised to end by.
 */
let f: BrokerFixture | undefined;
afterEach(() => f?.close());

describe('the backfill margin', () => {
  it('counts the kill grace and the cleanup timeout as configured', () => {
    f = makeBrokerDeps({ config: { timing: { kill_grace_seconds: 20, cleanup_timeout_seconds: 900 } } });
    const scheduler = new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
    expect(scheduler.snapshot(f.deps.clock.now()).config.backfill_margin_seconds).toBe(
      BACKFILL_MARGIN_SECONDS + 20 + 900,
    );
  });
});
