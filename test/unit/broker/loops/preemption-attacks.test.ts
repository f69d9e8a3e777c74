import { afterEach, describe, expect, it } from 'vitest';
import { sweepGrants } from '../../../../src/broker/loops/grant-sweep.js';
import { sweepExecutions } from '../../../../src/broker/loops/liveness.js';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { PREEMPT_SLACK_SECONDS } from '../../../../src/broker/loops/snapshot.js';
import { createPrincipal } from '../../../../src/broker/principals.js';
import { createAccount } from '../../../../src/broker/tools/accounts.js';
import { handleExecutionReport } from '../../../../src/broker/workers/reports.js';
import { BrokerError } from '../../../../src/contracts/errors.js';
import { PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import type { ExecutionPhase } from '../../../../src/domain/machines/execution.js';
import type { ExecutionRecord } from '../../../../src/store/leases-repo.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { enrolledCluster, samples, WORKER } from '../../../support/enrolled-cluster.js';
import { validSpec } from '../../../support/spec.js';

/**
 * Attacks on reclaim by preemption at the broker's use cases (docs/operations.md "Borrowing and
 * reclaim"), on an in-memory store, a manual clock and one enrolled 4-card worker driven by hand-made
 * reports (test/integration/cluster/preemption.test.ts runs the honest story over a real link): team-a
 * (no nominal share) borrows the worker with two 2-card preemptible tasks; team-b (nominal 2) asks for 2.
 */

let f: BrokerFixture | undefined;
afterEach(() => f?.close());
let keys = 0;
const key = () => `preempt-attack-${++keys}`;

type Phase = Exclude<ExecutionPhase, 'assigned'>;

async function setUp() {
  const c = await enrolledCluster([]);
  f = c.f;
  const fx = c.f;
  createAccount(fx.deps, 'test', { name: 'team-a' });
  createAccount(fx.deps, 'test', { name: 'team-b', nominal_cards: 2 });
  const member = (name: string, account: string) =>
    createPrincipal(fx.deps, { name, roles: ['submitter'], account }, 'test').principal;
  const alice = member('alice-a', 'team-a');
  const bob = member('bob-b', 'team-b');
  const rita = fx.deps.store.principals.findByName('rita')!;
  const scheduler = new Scheduler(fx.deps, fx.deps.cluster.fleet, fx.deps.cluster.link);

  async function approve(p: Principal, over: Parameters<typeof validSpec>[0] = {}): Promise<string> {
    const r = (await fx.invoke(p, 'create_proposal', {
      spec: validSpec({ cards: { count: 2 }, outputs: [], ...over }),
      idempotency_key: key(),
    })) as { proposal_id: string; revision_id: string };
    const ids = { proposal_id: r.proposal_id, revision_id: r.revision_id };
    const confirmed = (await fx.invoke(p, 'confirm_revision', { ...ids, idempotency_key: key() })) as {
      state: string;
    };
    // A standing grant may have approved it already.
    if (confirmed.state !== 'APPROVED')
      await fx.invoke(rita, 'submit_review', {
        ...ids,
        decision: 'APPROVE',
        comments: 'ok',
        idempotency_key: key(),
      });
    return (
      fx.deps.store.db.prepare('SELECT id FROM tasks WHERE proposal_id = ?').get(r.proposal_id) as {
        id: string;
      }
    ).id;
  }

  /** The task's newest execution. */
  const execOf = (taskId: string): ExecutionRecord => {
    const lease = fx.deps.store.leases.latestLeaseForTask(taskId)!;
    return fx.deps.store.leases.executionForLease(lease.id)!;
  };

  /** A worker report; returns the refusal's code, or null when it was taken. */
  function report(e: ExecutionRecord, phase: Phase, extra: Record<string, unknown> = {}): string | null {
    try {
      fx.deps.store.transaction(() =>
        handleExecutionReport(fx.deps, WORKER, {
          type: 'execution',
          protocol_version: PROTOCOL_VERSION,
          boot_id: 'boot-1',
          seq: ++keys,
          execution_id: e.id,
          task_id: e.task_id,
          lease_epoch: e.lease_epoch,
          phase,
          ...extra,
        } as Parameters<typeof handleExecutionReport>[2]),
      );
      return null;
    } catch (err) {
      if (err instanceof BrokerError) return err.code;
      throw err;
    }
  }

  const pass = () => scheduler.runPass();
  /** The claimants going first now (as the scheduler asks, with the default slack). */
  const claimants = () =>
    fx.deps.store.preemptions.claimants(
      0,
      c.clock.now(),
      fx.deps.config.timing.cleanup_timeout_seconds + PREEMPT_SLACK_SECONDS,
    );
  /** Time passes; the worker keeps sampling (it stays online). */
  const tick = (ms: number) => {
    c.clock.advance(ms);
    fx.deps.cluster.fleet.touched(WORKER, c.clock.now());
    fx.deps.cluster.fleet.sampled(WORKER, samples, null, c.clock.now());
  };
  const state = (taskId: string) => fx.deps.store.tasks.get(taskId)!.state;
  const start = (taskId: string) => {
    const e = execOf(taskId);
    report(e, 'accepted');
    report(e, 'started');
    expect(state(taskId)).toBe('RUNNING');
    return e;
  };
  const preemptCancels = () =>
    fx.deps.store.outbox
      .unacked(WORKER)
      .map((o) => o.body as { type: string; preempt?: boolean; execution_id?: string })
      .filter((m) => m.type === 'cancel' && m.preempt === true);
  /** Worker side of an honest preemption: SIGTERM, PREEMPTED, cleanup receipt. */
  const stopPreempted = (e: ExecutionRecord) => {
    report(e, 'exited', { exit_code: null, signal: 'SIGTERM', failure_reason: 'PREEMPTED', outputs: [] });
    report(e, 'cleaned');
  };

  /** a1, a2 RUNNING (team-a, preemptible, 2 cards each), b1 queued: the pass asks a2 to stop for b1. */
  async function preempting() {
    const a1 = await approve(alice, { preemptible: true });
    pass();
    const ea1 = start(a1);
    c.clock.advance(1000);
    const a2 = await approve(alice, { preemptible: true });
    pass();
    const ea2 = start(a2);
    const b1 = await approve(bob);
    const d = pass();
    expect(d.preemptions.map((p) => p.task_id)).toEqual([a2]);
    expect(preemptCancels().map((m) => m.execution_id)).toEqual([ea2.id]);
    return { a1, a2, b1, ea1, ea2 };
  }

  return {
    ...c,
    fx,
    alice,
    bob,
    rita,
    tick,
    claimants,
    approve,
    execOf,
    report,
    pass,
    state,
    start,
    stopPreempted,
    preempting,
  };
}

/** team-a's a1 RUNNING, and a standing grant (drafted from a base revision a person approved) for team-a. */
async function withGrant(ttlSeconds = 3600) {
  const t = await setUp();
  // A plain argv (an inline `sh -c` is never coverable by a grant).
  const spec = {
    preemptible: true,
    time_limit_seconds: 600,
    runtime: { kind: 'process' as const, argv: ['/bin/sh', 'train.sh'] },
  };
  const a1 = await t.approve(t.alice, spec);
  t.pass();
  t.start(a1);
  // A person approves the base revision; a grant drafted from it approves the next one.
  const base = (await t.fx.invoke(t.alice, 'create_proposal', {
    spec: validSpec({ cards: { count: 2 }, outputs: [], ...spec }),
    idempotency_key: key(),
  })) as { proposal_id: string; revision_id: string };
  const baseIds = { proposal_id: base.proposal_id, revision_id: base.revision_id };
  await t.fx.invoke(t.alice, 'confirm_revision', { ...baseIds, idempotency_key: key() });
  await t.fx.invoke(t.rita, 'submit_review', {
    ...baseIds,
    decision: 'APPROVE',
    comments: 'ok',
    idempotency_key: key(),
  });
  const baseTask = (
    t.fx.deps.store.db.prepare('SELECT id FROM tasks WHERE proposal_id = ?').get(base.proposal_id) as {
      id: string;
    }
  ).id;
  await t.fx.invoke(t.alice, 'cancel_task', { task_id: baseTask, idempotency_key: key() });
  const g = (await t.fx.invoke(t.alice, 'request_grant', {
    base_revision_id: base.revision_id,
    scope: {},
    max_runs: 5,
    max_card_hours: 1,
    concurrency: 10,
    ttl_seconds: ttlSeconds,
    reason: 'iterate',
    idempotency_key: key(),
  })) as { grant: { grant_id: string } };
  await t.fx.invoke(t.rita, 'decide_grant', {
    grant_id: g.grant.grant_id,
    decision: 'APPROVE',
    idempotency_key: key(),
  });
  return { t, spec, a1, grantId: g.grant.grant_id };
}

describe('attacks on reclaim by preemption (broker)', () => {
  it('a worker’s PREEMPTED for a lease the master never asked to stop does not requeue the task', async () => {
    const t = await setUp();
    const { a1, ea1 } = await t.preempting();
    // Under another epoch than its own, a report about a1 is refused.
    const forged = { ...ea1, lease_epoch: ea1.lease_epoch + 1 };
    expect(
      t.report(forged, 'exited', { exit_code: 0, signal: null, failure_reason: 'PREEMPTED', outputs: [] }),
    ).toBe('STALE_EPOCH');
    expect(t.state(a1)).toBe('RUNNING');
    // a1 was not asked: a worker claiming PREEMPTED (exit 0) completes it, by a signal fails it.
    t.report(ea1, 'exited', { exit_code: 0, signal: null, failure_reason: 'PREEMPTED', outputs: [] });
    t.report(ea1, 'cleaned');
    expect(t.state(a1)).toBe('COMPLETED');
    expect(t.fx.deps.store.preemptions.countFor(a1)).toBe(0);
  });

  it('a stale report of the first run, replayed after the requeue, never moves the task’s next run', async () => {
    const t = await setUp();
    const { a2, b1, ea2 } = await t.preempting();
    t.stopPreempted(ea2);
    expect(t.state(a2)).toBe('QUEUED');
    // b1 takes a2's cards, runs and ends; a2 runs again on a new lease.
    t.pass();
    const eb1 = t.start(b1);
    t.report(eb1, 'exited', { exit_code: 0, signal: null, outputs: [] });
    t.report(eb1, 'cleaned');
    expect(t.state(b1)).toBe('COMPLETED');
    t.pass();
    const second = t.start(a2);
    expect(second.id).not.toBe(ea2.id);
    // Replays of the first run, under its own (valid) epoch: duplicates, and one off the path.
    for (const [phase, extra] of [
      ['started', {}],
      ['exited', { exit_code: 0, signal: null, outputs: [] }],
      ['cleaned', {}],
      ['cleanup_failed', {}],
      ['rejected', { failure_reason: 'SETUP_FAILED' }],
    ] as Array<[Phase, Record<string, unknown>]>) {
      t.report(ea2, phase, extra);
      expect(t.state(a2), `after a replayed ${phase}`).toBe('RUNNING');
      expect(t.fx.deps.store.leases.lease(second.lease_id)!.state).toBe('ACTIVE');
    }
    // The second run's own reports still end it normally.
    t.report(second, 'exited', { exit_code: 0, signal: null, outputs: [] });
    t.report(second, 'cleaned');
    expect(t.state(a2)).toBe('COMPLETED');
  });

  it('the claimant cancelled while its victims stop: they are still requeued, and it goes first no more', async () => {
    const t = await setUp();
    const { a2, b1, ea2 } = await t.preempting();
    await t.fx.invoke(t.bob, 'cancel_task', { task_id: b1, idempotency_key: key() });
    expect(t.state(b1)).toBe('CANCELLED');
    expect(t.claimants()).toEqual([]);
    t.stopPreempted(ea2);
    expect(t.state(a2)).toBe('QUEUED');
    // a2 simply runs again on its old cards.
    expect(t.pass().grants.map((g) => g.task_id)).toEqual([a2]);
  });

  it('the victim’s owner cancels while it stops: the run ends CANCELLED, not requeued', async () => {
    const t = await setUp();
    const { a2, ea2 } = await t.preempting();
    await t.fx.invoke(t.alice, 'cancel_task', { task_id: a2, idempotency_key: key() });
    t.stopPreempted(ea2);
    expect(t.state(a2)).toBe('CANCELLED');
  });

  it('a grant-approved run preempted once: one run of the grant, charged for both runs’ card-seconds', async () => {
    const { t, spec, grantId } = await withGrant();
    t.clock.advance(1000);
    const g1 = await t.approve(t.alice, spec);
    expect(t.fx.deps.store.grants.runOfTask(g1)?.grant_id).toBe(grantId);
    t.pass();
    const first = t.start(g1);
    // b1 (team-b, within its nominal 2) preempts g1, the newest lease, after 30 s.
    const b1 = await t.approve(t.bob);
    t.tick(30_000);
    expect(t.pass().preemptions.map((p) => p.task_id)).toEqual([g1]);
    t.stopPreempted(first);
    expect(t.state(g1)).toBe('QUEUED');
    t.pass();
    const eb1 = t.start(b1);
    t.report(eb1, 'exited', { exit_code: 0, signal: null, outputs: [] });
    t.report(eb1, 'cleaned');
    t.pass();
    const second = t.start(g1);
    t.tick(40_000);
    t.report(second, 'exited', { exit_code: 0, signal: null, outputs: [] });
    t.report(second, 'cleaned');
    expect(t.state(g1)).toBe('COMPLETED');
    const grant = t.fx.deps.store.grants.get(grantId)!;
    expect(grant.runs_used).toBe(1);
    expect(grant.running).toBe(0);
    const firstRun = t.fx.deps.store.db
      .prepare('SELECT sum(card_seconds) AS s FROM usage_charges WHERE lease_id = ?')
      .get(first.lease_id) as { s: number };
    expect(firstRun.s).toBeGreaterThanOrEqual(60);
    expect(grant.card_seconds_charged).toBe(firstRun.s + 2 * 40);
    expect(t.fx.deps.store.grants.runOfTask(g1)!.card_seconds_charged).toBe(firstRun.s + 2 * 40);
  });

  it('a grant-approved run preempted after its grant expired is not started again: CANCELLED, settled once', async () => {
    const { t, spec, grantId } = await withGrant(600);
    t.clock.advance(1000);
    const g1 = await t.approve(t.alice, spec);
    t.pass();
    const first = t.start(g1);
    // The grant expires while g1 runs (a running task is left to run).
    t.tick(601_000);
    sweepGrants(t.fx.deps);
    expect(t.fx.deps.store.grants.get(grantId)!.state).toBe('EXPIRED');
    expect(t.state(g1)).toBe('RUNNING');
    await t.approve(t.bob);
    expect(t.pass().preemptions.map((p) => p.task_id)).toEqual([g1]);
    // Its requeue finds the grant lapsed: cancelled at once (it neither waits for cards nor holds the
    // owner's queue), never started again.
    t.stopPreempted(first);
    expect(t.state(g1)).toBe('CANCELLED');
    expect(t.pass().grants.map((g) => g.task_id)).not.toContain(g1);
    expect(t.fx.deps.store.tasks.get(g1)!.reason).toMatchObject({ code: 'grant_not_active' });
    const run = t.fx.deps.store.grants.runOfTask(g1)!;
    expect(run.outcome).toBe('CANCELLED');
    const firstRun = t.fx.deps.store.db
      .prepare('SELECT sum(card_seconds) AS s FROM usage_charges WHERE lease_id = ?')
      .get(first.lease_id) as { s: number };
    expect(run.card_seconds_charged).toBe(Math.min(run.card_seconds_reserved, firstRun.s));
    expect(t.fx.deps.store.grants.get(grantId)!.running).toBe(0);
  });

  it('a worker that ignores the preemption does not hold its claimant first and waiting for ever', async () => {
    const t = await setUp();
    const { a1, a2, b1 } = await t.preempting();
    expect(t.claimants()).toEqual([b1]);
    // Within the grace, the cleanup timeout and the slack it waits for a2, and nothing more is stopped.
    const { kill_grace_seconds, cleanup_timeout_seconds } = t.fx.deps.config.timing;
    t.tick((kill_grace_seconds + cleanup_timeout_seconds + PREEMPT_SLACK_SECONDS - 1) * 1000);
    expect(t.pass().preemptions).toEqual([]);
    // The worker never stops a2 (still RUNNING, its lease ACTIVE): past that, b1 stops waiting for it,
    // reclaims elsewhere (a1), and a2 is never asked twice.
    t.tick(2000);
    expect(t.state(a2)).toBe('RUNNING');
    expect(t.claimants()).toEqual([]);
    const d = t.pass();
    expect(d.preemptions.map((p) => [p.task_id, p.for_task_id])).toEqual([[a1, b1]]);
    expect(t.fx.deps.store.preemptions.countFor(a2)).toBe(1);
  });

  it('a master restart mid-preemption (a fresh scheduler, the same store) asks nothing twice and requeues the victim', async () => {
    const t = await setUp();
    const { a2, b1, ea2 } = await t.preempting();
    const fresh = new Scheduler(t.fx.deps, t.fx.deps.cluster.fleet, t.fx.deps.cluster.link);
    const d = fresh.runPass();
    expect(d.preemptions).toEqual([]);
    expect(d.waiting.find((w) => w.task_id === b1)!.reason).toMatchObject({
      code: 'reclaiming',
      preempted: [a2],
    });
    // The cancel is still in the outbox for the worker; its reports after the restart requeue a2.
    t.stopPreempted(ea2);
    expect(t.state(a2)).toBe('QUEUED');
    expect(fresh.runPass().grants.map((g) => g.task_id)).toEqual([b1]);
  });

  it('a victim whose worker restarts mid-preemption (its run lost, WORKER_LOST) is requeued as preempted; the claimant gets the cards', async () => {
    const t = await setUp();
    const { a2, b1, ea2 } = await t.preempting();
    t.report(ea2, 'exited', { exit_code: null, signal: null, failure_reason: 'WORKER_LOST', outputs: [] });
    t.report(ea2, 'cleaned');
    // Its spec let it be stopped and run again (preemptible) and its cards were asked back: the restart
    // only ended the run sooner, so it queues again at its old place like any preempted run (ADR 0044).
    expect(t.state(a2)).toBe('QUEUED');
    expect(t.fx.deps.store.tasks.get(a2)!.failure_reason).toBeNull();
    expect(t.pass().grants.map((g) => g.task_id)).toEqual([b1]);
  });

  it('a victim whose worker is lost mid-preemption does not hold its claimant first, nor stop it reclaiming, forever', async () => {
    const t = await setUp();
    const { a2, b1, ea2 } = await t.preempting();
    expect(t.claimants()).toEqual([b1]);
    // The worker falls silent past the lease grace: a2's lease is quarantined (it may never come back).
    const { worker_offline_seconds, lease_grace_seconds } = t.fx.deps.config.timing;
    t.clock.advance((worker_offline_seconds + 1) * 1000);
    sweepExecutions(t.fx.deps, t.fx.deps.cluster.fleet);
    t.clock.advance((lease_grace_seconds + 1) * 1000);
    sweepExecutions(t.fx.deps, t.fx.deps.cluster.fleet);
    expect(t.fx.deps.store.leases.lease(ea2.lease_id)!.state).toBe('QUARANTINED');
    expect(t.state(a2)).toBe('RECONCILIATION_REQUIRED');
    // b1 is an ordinary queued task again: no first place, no 'reclaiming' wait on a lease in limbo.
    expect(t.claimants()).toEqual([]);
    expect(
      t.fx.deps.store.preemptions.running(t.clock.now(), 90).filter((r) => r.preempting_for !== null),
    ).toEqual([]);
  });
});
