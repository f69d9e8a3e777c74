import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../src/broker/loops/scheduler.js';
import type { TaskView } from '../../../src/contracts/views.js';
import { BACKFILL_MARGIN_SECONDS } from '../../../src/domain/scheduling/decide.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import {
  approveTask,
  clusterConfig,
  getTask,
  shellSpec,
  waitForAvailableCards,
  waitForTask,
  waitUntilSettled,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Backfill into a reservation on a real master and a real (simulated, 4-card) worker (ADR 0049): a
 * 2-card task runs with a 50-minute limit; a 4-card task, aged at once (reservation after 0 s), holds the
 * two free cards until that task ends; a 1-card task with a 60 s limit ends long before that and runs at
 * once on a held card, while a 1-card task with the same 50-minute limit (plus the margin: it would end after) waits behind the reservation. The
 * master's snapshot carries each task's limit and each running lease's end (start + limit).
 */

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig({ scheduling: { reservation_after_seconds: 0 } }) });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-backfill', { sampler: new SimSampler({ count: 4, seed: 'backfill' }) });
  await waitForAvailableCards(m, 4, 'four cards on gpu-backfill');
});

afterAll(async () => {
  await w?.close();
  await m?.close();
});

const waitTask = (id: string, ok: (t: TaskView) => boolean, what: string) => waitForTask(alice, id, ok, what);

describe('backfill into a reservation', () => {
  it('a short task runs on cards an aged wide task holds; a long one waits behind it; the wide task starts once the cards free', async () => {
    // Runs until cancelled (at most ~60 s), with a 50-minute limit.
    const long = await approveTask(
      alice,
      rita,
      shellSpec('i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done', {
        cards: { count: 2 },
        time_limit_seconds: 3000,
      }),
    );
    const running = await waitTask(long, (t) => t.state === 'RUNNING', 'the 2-card task RUNNING');
    const wide = await approveTask(alice, rita, shellSpec('true', { cards: { count: 4 } }));
    await waitTask(wide, (t) => t.reason?.['code'] === 'holding_reservation', 'the 4-card task holding');
    // The snapshot: the running lease ends by its start + its limit; the queued task carries its limit.
    const snap = new Scheduler(m.deps, m.deps.cluster.fleet, m.deps.cluster.link).snapshot(
      m.deps.clock.now(),
    );
    const ends = snap.workers[0]!.cards.filter((c) => c.leased).map((c) => c.lease_ends_by);
    const stop = Date.parse(running.started_at!) + 3000_000;
    expect(ends).toEqual([stop, stop]);
    expect(snap.tasks.find((t) => t.task_id === wide)?.time_limit_seconds).toBe(60);

    const slow = await approveTask(alice, rita, shellSpec('true', { time_limit_seconds: 3000 }));
    const quick = await approveTask(alice, rita, shellSpec('true', { time_limit_seconds: 60 }));
    expect((await waitUntilSettled(alice, quick)).state).toBe('COMPLETED');
    // The backfilled run was told its deadline (its 60 s limit plus the 60 s start-up allowance) and its
    // lease recorded it (ADR 0049 §5); the 2-card task, placed on open cards, has none.
    const planOf = (task: string) =>
      (
        m.deps.store.db
          .prepare("SELECT body FROM master_outbox WHERE json_extract(body, '$.type') = 'assign'")
          .all() as Array<{ body: string }>
      )
        .map((r) => JSON.parse(r.body).plan as { task_id: string; stop_within_seconds?: number })
        .find((p) => p.task_id === task);
    expect(planOf(quick)?.stop_within_seconds).toBe(60 + BACKFILL_MARGIN_SECONDS);
    expect(planOf(long)).toBeDefined();
    expect(planOf(long)?.stop_within_seconds).toBeUndefined();
    const stopBy = (task: string) =>
      m.deps.store.db.prepare('SELECT stop_by, created_at FROM leases WHERE task_id = ?').get(task) as {
        stop_by: number | null;
        created_at: number;
      };
    const q = stopBy(quick);
    expect(q.stop_by).toBe(q.created_at + (60 + BACKFILL_MARGIN_SECONDS) * 1000);
    expect(stopBy(long).stop_by).toBeNull();
    // The long one would still run when the wide one could start: it waits behind the reservation.
    const waiting = await getTask(alice, slow);
    expect(waiting.state).toBe('QUEUED');
    expect(waiting.reason?.['code']).toBe('reserved_for_older_task');
    expect((await getTask(alice, wide)).state).toBe('QUEUED');

    expectOk(await callTool(alice, 'cancel_task', { task_id: long, idempotency_key: m.key() }));
    expect((await waitUntilSettled(alice, wide)).state).toBe('COMPLETED');
    expect((await waitUntilSettled(alice, slow)).state).toBe('COMPLETED');
  });
});
