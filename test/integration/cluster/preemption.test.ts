import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import { createAccount, setAccount } from '../../../src/broker/tools/accounts.js';
import type { TaskView } from '../../../src/contracts/views.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import {
  approveTask,
  clusterConfig,
  getTask,
  type LeaseWatch,
  shellSpec,
  waitForAvailableCards,
  waitUntilSettled,
  watchLeaseCards,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Reclaim by preemption on a real master and a real (simulated, 4-card) worker
 * (docs/operations.md "Borrowing and reclaim"): team-a borrows the whole pool with preemptible tasks;
 * team-b asks within its nominal share of 2 cards: the newest of team-a's tasks gets SIGTERM, its lease is
 * released only after its cleanup receipt (no card ever held by two leases), team-b's task takes the
 * cards, and the preempted task queues again at its old place (no new review) and finishes in a second run
 * that sees GPU_BROKER_PREEMPTED=1. A task that is not preemptible is never stopped.
 */

/**
 * Runs until SIGTERM (a checkpoint then a clean exit) unless an earlier run was preempted, in which case
 * it finishes at once: COMPLETED proves the second run saw GPU_BROKER_PREEMPTED=1.
 */
const RESUMABLE =
  'echo "run preempted=$GPU_BROKER_PREEMPTED n=$GPU_BROKER_PREEMPTIONS"; ' +
  '[ "$GPU_BROKER_PREEMPTED" = 1 ] && exit 0; ' +
  "trap 'echo checkpoint; exit 0' TERM; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 3";

let m: TestMaster;
let w: TestWorker;
let alice: Client; // team-a: borrows
let bob: Client; // team-b: nominal 2
let rita: Client;
let watch: LeaseWatch;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  createAccount(m.deps, 'test', { name: 'team-a' });
  createAccount(m.deps, 'test', { name: 'team-b', nominal_cards: 2 });
  const token = (name: string, account: string) =>
    createPrincipal(m.deps, { name, roles: ['submitter'], account }, 'test').token;
  alice = await m.mcpClient(token('alice', 'team-a'));
  bob = await m.mcpClient(token('bob', 'team-b'));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  watch = watchLeaseCards(m.store, m.deps.notifier);
  w = await startWorkerOn(m, 'gpu-reclaim', { sampler: new SimSampler({ count: 4, seed: 'reclaim' }) });
  await waitForAvailableCards(m, 4, 'four cards on gpu-reclaim');
});

afterAll(async () => {
  watch?.stop();
  await w?.close();
  await m?.close();
});

const state = async (c: Client, id: string) => (await getTask(c, id)).state;

async function waitState(c: Client, id: string, want: string, timeoutMs = 15_000): Promise<TaskView> {
  return waitFor(
    async () => {
      const t = await getTask(c, id);
      return t.state === want ? t : null;
    },
    { what: `task ${id} ${want}`, timeoutMs },
  );
}

describe('reclaim by preemption', () => {
  it('stops the newest borrowed preemptible task for an account asking within its share; it queues again and finishes', async () => {
    const a1 = await approveTask(
      alice,
      rita,
      shellSpec(RESUMABLE, { cards: { count: 2 }, preemptible: true }),
    );
    await waitState(alice, a1, 'RUNNING');
    const a2 = await approveTask(
      alice,
      rita,
      shellSpec(RESUMABLE, { cards: { count: 2 }, preemptible: true, preemption_grace_seconds: 5 }),
    );
    await waitState(alice, a2, 'RUNNING');
    const b1 = await approveTask(bob, rita, shellSpec('true', { cards: { count: 2 } }));
    // b1 gets a2's cards (the newer lease); a2 is queued again, then runs again once cards free up.
    expect((await waitUntilSettled(bob, b1)).state).toBe('COMPLETED');
    const asked = m.store.db
      .prepare("SELECT subject_id, data FROM audit_events WHERE action = 'task.preempt_requested'")
      .all() as Array<{ subject_id: string; data: string }>;
    expect(asked.map((r) => r.subject_id)).toEqual([a2]);
    expect(JSON.parse(asked[0]!.data)).toMatchObject({ for_task_id: b1, grace_seconds: 5 });
    const metrics = await (
      await m.fetch(new URL('/metrics', m.url), { headers: { authorization: `Bearer ${m.operatorToken}` } })
    ).text();
    expect(metrics).toMatch(/^gpu_broker_preemptions_total 1$/m);
    // The same task (same revision, no new review) completes in a second run that saw GPU_BROKER_PREEMPTED=1.
    const done = await waitUntilSettled(alice, a2);
    expect(done.state).toBe('COMPLETED');
    // Its view says it was preempted once; b1's, never.
    expect(done.preemptions).toBe(1);
    expect((await getTask(bob, b1)).preemptions).toBe(0);
    const leases = m.store.db.prepare('SELECT count(*) AS n FROM leases WHERE task_id = ?').get(a2) as {
      n: number;
    };
    expect(leases.n).toBe(2);
    const requeued = m.store.db
      .prepare(
        "SELECT count(*) AS n FROM audit_events WHERE subject_id = ? AND action = 'task.cleaned_preempted'",
      )
      .get(a2) as { n: number };
    expect(requeued.n).toBe(1);
    // Each of a2's leases was charged once (two ledger rows).
    await waitFor(
      () =>
        (
          m.store.db.prepare('SELECT count(*) AS n FROM usage_charges WHERE task_id = ?').get(a2) as {
            n: number;
          }
        ).n === 2 || null,
      { what: 'both of a2’s leases charged', timeoutMs: 10_000 },
    );
    // a1 was never touched.
    expect(await state(alice, a1)).toBe('RUNNING');
    expectOk(await callTool(alice, 'cancel_task', { task_id: a1, idempotency_key: `cancel-${a1}` }));
    // Its trap exits 0 on SIGTERM: a cancelled task that exits cleanly completes (cancel_task documents it).
    expect((await waitUntilSettled(alice, a1)).state).toBe('COMPLETED');
    expect(watch.violations).toEqual([]);
  });

  it('never stops a task that is not preemptible: the claimant waits for cards', async () => {
    const c1 = await approveTask(alice, rita, shellSpec('sleep 30', { cards: { count: 4 } }));
    await waitState(alice, c1, 'RUNNING');
    const b2 = await approveTask(bob, rita, shellSpec('true', { cards: { count: 2 } }));
    const waiting = await waitFor(
      async () => {
        const t = await getTask(bob, b2);
        return t.state === 'QUEUED' && t.reason ? t : null;
      },
      { what: 'b2 explained', timeoutMs: 10_000 },
    );
    expect((waiting.reason as { code: string }).code).toBe('waiting_for_cards');
    // The account's policy makes every task of team-a preemptible: now it is reclaimed.
    setAccount(m.deps, 'test', { name: 'team-a', preemptible: true });
    m.deps.cluster.requestPass();
    expect((await waitUntilSettled(bob, b2)).state).toBe('COMPLETED');
    // c1 ran `sleep 30` with no trap: SIGTERM ended it, and it is queued again.
    await waitFor(async () => ((await state(alice, c1)) !== 'RUNNING' ? true : null), {
      what: 'c1 preempted',
      timeoutMs: 10_000,
    });
    expectOk(await callTool(alice, 'cancel_task', { task_id: c1, idempotency_key: `cancel-${c1}` }));
    expect((await waitUntilSettled(alice, c1)).state).toBe('CANCELLED');
    expect(watch.violations).toEqual([]);
  });
});
