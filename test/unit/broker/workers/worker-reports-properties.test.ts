import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { sweepExecutions } from '../../../../src/broker/loops/liveness.js';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { handleExecutionReport } from '../../../../src/broker/workers/reports.js';
import { acceptHello, recordSample } from '../../../../src/broker/workers/session.js';
import { BrokerError } from '../../../../src/contracts/errors.js';
import { PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import type { ManualClock } from '../../../../src/platform/clock.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { CARDS, enrolledCluster, samples, WORKER } from '../../../support/enrolled-cluster.js';

/**
 * Whatever a worker reports, in whatever order — legal phases, illegal jumps, stale epochs, hellos that
 * list any subset of its executions in any phase, silences long enough for the sweeper, an operator's
 * reconcile at any moment — the master's
 * records keep two invariants. Real SQLite (in memory), the real use cases the hub calls
 * (handleExecutionReport with the hub's refusal savepoint, acceptHello, recordSample), the real
 * scheduler and sweeper; only the socket is left out.
 *
 *   1. no live task without a lease: a task that is ASSIGNED, RUNNING, FINALIZING or
 *      RECONCILIATION_REQUIRED always has a lease that still holds its cards (ACTIVE, RELEASING or
 *      QUARANTINED), so its cards cannot be granted to another task;
 *   2. no two live executions hold one card: the leases of unfinished executions are disjoint, and so
 *      are all live leases;
 *   3. every lease is charged exactly once (docs/operations.md "Accounts and usage"): a lease not yet
 *      RELEASED (ACTIVE, RELEASING, or QUARANTINED, from which a returning worker takes it back) has no
 *      usage row; a RELEASED one has rows for all its cards, with one end, charged cards × the whole
 *      seconds from its grant to that end, to its owner's account — whatever order the reports came
 *      in, however often they were resent, through quarantines and returns.
 */

const LIVE_TASK = new Set(['ASSIGNED', 'RUNNING', 'FINALIZING', 'RECONCILIATION_REQUIRED']);
const LIVE_LEASE = new Set(['ACTIVE', 'RELEASING', 'QUARANTINED']);
const PHASES = ['accepted', 'rejected', 'started', 'exited', 'cleaned', 'cleanup_failed'] as const;

/** One thing that happens to the master; `pick` chooses among the executions that exist by then. */
type Step =
  | { kind: 'pass' }
  | { kind: 'report'; pick: number; phase: (typeof PHASES)[number]; stale: boolean }
  | { kind: 'honest'; pick: number; fail: boolean }
  | {
      kind: 'hello';
      listed: boolean[];
      phases: Array<(typeof PHASES)[number]>;
      /** Whether it says it processed everything the master sent (master_marks). */
      caughtUp: boolean;
    }
  | { kind: 'sample'; held: number[] }
  | { kind: 'reconcile'; pick: number; resolution: 'COMPLETED' | 'FAILED' | 'CANCELLED' }
  | { kind: 'silence'; seconds: number };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ kind: 'pass' as const }) },
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('report' as const),
      pick: fc.nat({ max: 7 }),
      phase: fc.constantFrom(...PHASES),
      stale: fc.boolean(),
    }),
  },
  {
    weight: 10,
    arbitrary: fc.record({
      kind: fc.constant('honest' as const),
      pick: fc.nat({ max: 7 }),
      fail: fc.boolean(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('hello' as const),
      listed: fc.array(fc.boolean(), { minLength: 8, maxLength: 8 }),
      phases: fc.array(fc.constantFrom(...PHASES), { minLength: 8, maxLength: 8 }),
      caughtUp: fc.boolean(),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('sample' as const),
      held: fc.uniqueArray(fc.nat({ max: CARDS - 1 }), { maxLength: 2 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('silence' as const),
      seconds: fc.integer({ min: 1, max: 400 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('reconcile' as const),
      pick: fc.nat({ max: 7 }),
      resolution: fc.constantFrom('COMPLETED' as const, 'FAILED' as const, 'CANCELLED' as const),
    }),
  },
);

let keys = 0;
const key = () => `prop-${++keys}`;

/** Every execution the master ever created, oldest first (the ids sort by time). */
function executions(f: BrokerFixture) {
  const rows = f.deps.store.db.prepare('SELECT id FROM executions ORDER BY id').all() as Array<{
    id: string;
  }>;
  return rows.map((r) => f.deps.store.leases.execution(r.id)!);
}

/** The highest seq the master sent in its boot, as a worker that processed everything reports it. */
function sentMarks(f: BrokerFixture): Array<{ boot_id: string; seq: number }> {
  const bootId = f.deps.cluster.link.bootId;
  const row = f.deps.store.db
    .prepare('SELECT max(seq) AS seq FROM master_outbox WHERE boot_id = ?')
    .get(bootId) as { seq: number | null };
  return row.seq === null ? [] : [{ boot_id: bootId, seq: row.seq }];
}

/** The report an honest worker sends next for an execution at `phase` (a failing one at times). */
function honestNext(phase: string, fail: boolean): (typeof PHASES)[number] | null {
  switch (phase) {
    case 'assigned':
      return fail ? 'rejected' : 'accepted';
    case 'accepted':
      return 'started';
    case 'started':
      return 'exited';
    case 'exited':
      return fail ? 'cleanup_failed' : 'cleaned';
    case 'cleanup_failed':
      return 'cleaned';
    default:
      return null;
  }
}

/** Applies one step the way the hub would (or, for `reconcile`, an operator through the dispatcher). */
async function apply(
  f: BrokerFixture,
  clock: ManualClock,
  scheduler: Scheduler,
  step: Step,
  boot: { n: number },
): Promise<void> {
  const { deps } = f;
  const now = clock.now();
  switch (step.kind) {
    case 'reconcile': {
      // Mostly what an operator would reconcile: an undecided task, or an ended one still holding cards.
      const all = executions(f);
      const open = all.filter((x) => {
        const t = deps.store.tasks.get(x.task_id);
        const l = deps.store.leases.lease(x.lease_id);
        return t?.state === 'RECONCILIATION_REQUIRED' || l?.state === 'QUARANTINED';
      });
      const pool = open.length > 0 && step.pick % 4 !== 0 ? open : all;
      const e = pool[step.pick % Math.max(1, pool.length)];
      if (!e) return;
      try {
        await f.invoke(f.principal(`op-${key()}`, ['operator']), 'reconcile_task', {
          task_id: e.task_id,
          resolution: step.resolution,
          reason: 'property test',
          idempotency_key: key(),
        });
      } catch (err) {
        if (!(err instanceof BrokerError)) throw err; // not reconcilable from where it is
      }
      return;
    }
    case 'pass':
      scheduler.runPass();
      return;
    case 'honest':
    case 'report': {
      const all = executions(f);
      const e = all[step.pick % Math.max(1, all.length)];
      if (!e) return;
      const phase = step.kind === 'report' ? step.phase : honestNext(e.phase, step.fail);
      if (phase === null) return;
      const stale = step.kind === 'report' && step.stale;
      deps.cluster.fleet.touched(WORKER, now);
      // The hub's shape: a refusal rolls back the report's own effects, never the rest.
      deps.store.transaction(() => {
        try {
          deps.store.transaction(() =>
            handleExecutionReport(deps, WORKER, {
              type: 'execution',
              protocol_version: PROTOCOL_VERSION,
              boot_id: `boot-${boot.n}`,
              seq: 1,
              execution_id: e.id,
              task_id: e.task_id,
              lease_epoch: stale ? Math.max(1, e.lease_epoch - 1) : e.lease_epoch,
              phase,
              exit_code: phase === 'exited' ? (step.kind === 'honest' && step.fail ? 1 : 0) : null,
            }),
          );
        } catch (err) {
          if (!(err instanceof BrokerError)) throw err;
        }
      });
      return;
    }
    case 'hello': {
      boot.n++;
      const all = executions(f);
      const listed = all
        .map((e, i) => ({ e, i }))
        .filter(({ i }) => step.listed[i % step.listed.length])
        .map(({ e, i }) => ({
          execution_id: e.id,
          task_id: e.task_id,
          lease_epoch: e.lease_epoch,
          phase: step.phases[i % step.phases.length]!,
          cards: deps.store.leases.lease(e.lease_id)!.cards.map((c) => c.index),
        }));
      acceptHello(
        deps,
        WORKER,
        {
          type: 'hello',
          protocol_version: PROTOCOL_VERSION,
          worker_id: WORKER,
          boot_id: `boot-${boot.n}`,
          version: '0',
          hostname: 'host',
          provider: 'sim',
          cards: samples,
          executions: listed,
          master_marks: step.caughtUp ? sentMarks(f) : [],
          card_epochs: [],
          isolation: 'bwrap',
          container_engine: null,
          mounts: [],
          backend: 'local',
          slurm: null,
          seccomp: null,
          host: null,
          // Lets the sweeper withdraw and requeue an assign it never heard accepted (docs/operations.md "Partitions").
          starts_after_ack: true,
        },
        now,
      );
      return;
    }
    case 'sample':
      deps.store.transaction(() =>
        recordSample(
          deps,
          WORKER,
          {
            type: 'sample',
            protocol_version: PROTOCOL_VERSION,
            boot_id: `boot-${boot.n}`,
            seq: 1,
            sampled_at: now,
            cards: samples,
            sampler_error: null,
            held_cards: step.held,
          },
          now,
        ),
      );
      return;
    case 'silence':
      clock.advance(step.seconds * 1000);
      deps.cluster.fleet.disconnected(WORKER, null, clock.now());
      sweepExecutions(deps, deps.cluster.fleet);
      return;
  }
}

/** The two invariants of the module comment; returns what is wrong (empty when nothing). */
function violations(f: BrokerFixture): string[] {
  const { store } = f.deps;
  const found: string[] = [];
  const tasks = store.db.prepare('SELECT id, state FROM tasks').all() as Array<{ id: string; state: string }>;
  for (const t of tasks) {
    if (!LIVE_TASK.has(t.state)) continue;
    const lease = store.leases.latestLeaseForTask(t.id);
    if (!lease || !LIVE_LEASE.has(lease.state))
      found.push(`task ${t.id} is ${t.state} with lease ${lease?.state ?? 'none'}`);
  }
  const holder = new Map<number, string>();
  for (const lease of store.leases.liveLeases())
    for (const c of lease.cards) {
      const other = holder.get(c.index);
      if (other) found.push(`card ${c.index} held by live leases ${other} and ${lease.id}`);
      holder.set(c.index, lease.id);
    }
  const byExecution = new Map<number, string>();
  for (const e of store.leases.unfinished())
    for (const c of store.leases.lease(e.lease_id)?.cards ?? []) {
      const other = byExecution.get(c.index);
      if (other) found.push(`card ${c.index} held by unfinished executions ${other} and ${e.id}`);
      byExecution.set(c.index, e.id);
    }
  for (const lease of store.db.prepare('SELECT id FROM leases').all() as Array<{ id: string }>) {
    const l = store.leases.lease(lease.id)!;
    const rows = store.db.prepare('SELECT * FROM usage_charges WHERE lease_id = ?').all(l.id) as Array<{
      cards: number;
      started_at: number;
      ended_at: number;
      card_seconds: number;
      account: string;
    }>;
    if (l.state !== 'RELEASED') {
      if (rows.length > 0) found.push(`lease ${l.id} is ${l.state} but was charged`);
      continue;
    }
    const cards = rows.reduce((n, r) => n + r.cards, 0);
    if (cards !== l.cards.length)
      found.push(`lease ${l.id} (${l.state}): ${cards} cards charged of ${l.cards.length}`);
    const ends = new Set(rows.map((r) => r.ended_at));
    if (ends.size !== 1) found.push(`lease ${l.id}: charged with ${ends.size} ends`);
    for (const r of rows) {
      const want = r.cards * Math.ceil((r.ended_at - l.created_at) / 1000);
      if (r.started_at !== l.created_at || r.ended_at > l.updated_at || r.card_seconds !== want)
        found.push(`lease ${l.id}: charged ${r.card_seconds} card-seconds, want ${want}`);
      if (r.account !== 'default') found.push(`lease ${l.id}: charged to ${r.account}`);
    }
  }
  return found;
}

describe('worker reports against the master records (fast-check, real SQLite)', () => {
  it('no sequence of worker reports leaves a live task without a lease, one card with two, or a lease charged other than once', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: 1, max: 2 }), { minLength: 2, maxLength: 4 }),
        fc.array(stepArb, { minLength: 10, maxLength: 40, size: 'max' }),
        async (counts, steps) => {
          const { f, clock } = await enrolledCluster(counts);
          try {
            const scheduler = new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
            scheduler.runPass();
            const boot = { n: 0 };
            for (const step of steps) {
              await apply(f, clock, scheduler, step, boot);
              expect(violations(f), JSON.stringify(step)).toEqual([]);
            }
          } finally {
            f.close();
          }
        },
      ),
      { numRuns: 50 },
    );
  });
});
