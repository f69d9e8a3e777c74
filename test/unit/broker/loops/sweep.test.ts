import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  IDEMPOTENCY_RETENTION_MS,
  newSweepMarks,
  RETENTION_SWEEP_MS,
  REVALIDATE_MS,
  type SweepDeps,
  tick,
} from '../../../../src/broker/loops/sweep.js';
import { ManualClock } from '../../../../src/platform/clock.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { validSpec } from '../../../support/spec.js';

/** The master's sweep (src/broker/loops/sweep.ts), one `tick` at a time on a ManualClock. */

const TTL_S = 3600;
let f: BrokerFixture;
let clock: ManualClock;
let alice: Principal;
let revalidations: number;
let sweep: SweepDeps;

beforeEach(() => {
  clock = new ManualClock();
  f = makeBrokerDeps({ clock, config: { timing: { proposal_ttl_seconds: TTL_S } } });
  alice = f.principal('alice', ['submitter']);
  revalidations = 0;
  sweep = { broker: f.deps, revalidateSessions: () => revalidations++, marks: newSweepMarks() };
});

afterEach(() => f.close());

describe('the sweep tick', () => {
  it('runs every step on the first tick, then the throttled steps only when their interval has passed', () => {
    tick(sweep, clock.now());
    expect(revalidations).toBe(1);
    expect(f.passesRequested()).toBe(1);
    expect(sweep.marks).toEqual({ lastRetention: clock.now(), lastRevalidate: clock.now() });

    // Step 2 waits for more than REVALIDATE_MS; steps 3 to 5 run on every tick.
    clock.advance(REVALIDATE_MS);
    tick(sweep, clock.now());
    expect(revalidations).toBe(1);
    expect(f.passesRequested()).toBe(2);
    clock.advance(1);
    tick(sweep, clock.now());
    expect(revalidations).toBe(2);
    expect(f.passesRequested()).toBe(3);
  });

  it('prunes idempotency keys past their retention only when the retention step is due (step 1)', async () => {
    const start = clock.now();
    tick(sweep, clock.now()); // the first retention pass, before the key exists
    await f.invoke(alice, 'create_proposal', { spec: validSpec(), idempotency_key: 'k1' });
    const stored = () => f.deps.store.idempotency.get(alice.id, 'create_proposal', 'k1');
    expect(stored()).toBeDefined();

    clock.advance(IDEMPOTENCY_RETENTION_MS + 1);
    // Retention last ran at `start`: due again (more than RETENTION_SWEEP_MS ago), so the key goes.
    expect(clock.now() - start).toBeGreaterThan(RETENTION_SWEEP_MS);
    tick(sweep, clock.now());
    expect(stored()).toBeUndefined();
  });

  it('runs the retention step again only after RETENTION_SWEEP_MS (step 1)', () => {
    const start = clock.now();
    tick(sweep, start);
    clock.advance(RETENTION_SWEEP_MS);
    tick(sweep, clock.now());
    expect(sweep.marks.lastRetention).toBe(start);
    clock.advance(1);
    tick(sweep, clock.now());
    expect(sweep.marks.lastRetention).toBe(clock.now());
  });

  it('expires proposals past their TTL on every tick (step 3)', async () => {
    const created = (await f.invoke(alice, 'create_proposal', {
      spec: validSpec(),
      idempotency_key: 'k2',
    })) as {
      proposal_id: string;
    };
    tick(sweep, clock.now());
    expect(f.deps.store.proposals.get(created.proposal_id)?.state).toBe('DRAFT');
    clock.advance(TTL_S * 1000);
    tick(sweep, clock.now());
    expect(f.deps.store.proposals.get(created.proposal_id)?.state).toBe('EXPIRED');
  });
});
