import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import { createAccount } from '../../../src/broker/tools/accounts.js';
import type { TaskView } from '../../../src/contracts/views.js';
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
 * Backfill (ADR 0049) never takes the cards held for a task they are being reclaimed for (ADR 0044), on a
 * real master and a real (simulated, 4-card) worker. team-a fills the pool: two long tasks that are not
 * preemptible, then a stubborn preemptible one (ignores SIGTERM, killed after its 4 s grace, 50-minute
 * limit) and a cooperative one (exits on SIGTERM; its second run finishes at once; 60 s limit). team-b
 * asks for 2 cards within its nominal share: both preemptible tasks are stopped. The cooperative one is
 * back in the queue first, with a limit far shorter than the others' hard stops: before the fix it
 * backfilled into the card freed for team-b and ran again ahead of it. Now team-b's task starts first.
 */

const LONG = 'i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done';
const STUBBORN = `trap '' TERM; ${LONG}`;
const RESUMABLE = `[ "$GPU_BROKER_PREEMPTED" = 1 ] && exit 0; trap 'exit 0' TERM; ${LONG}`;

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let bob: Client;
let rita: Client;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  createAccount(m.deps, 'test', { name: 'team-a' });
  createAccount(m.deps, 'test', { name: 'team-b', nominal_cards: 2 });
  const token = (name: string, account: string) =>
    createPrincipal(m.deps, { name, roles: ['submitter'], account }, 'test').token;
  alice = await m.mcpClient(token('alice', 'team-a'));
  bob = await m.mcpClient(token('bob', 'team-b'));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-bf-reclaim', { sampler: new SimSampler({ count: 4, seed: 'bf-reclaim' }) });
  await waitForAvailableCards(m, 4, 'four cards on gpu-bf-reclaim');
});

afterAll(async () => {
  await w?.close();
  await m?.close();
});

const running = (c: Client, id: string) =>
  waitForTask(c, id, (t: TaskView) => t.state === 'RUNNING', `task ${id} RUNNING`);

describe('backfill beside reclaim', () => {
  it('a requeued victim does not backfill into the cards freed for its claimant', async () => {
    const keep = [];
    for (let i = 0; i < 2; i++) {
      const id = await approveTask(alice, rita, shellSpec(LONG, { time_limit_seconds: 3000 }));
      await running(alice, id);
      keep.push(id);
    }
    const stubborn = await approveTask(
      alice,
      rita,
      shellSpec(STUBBORN, { preemptible: true, preemption_grace_seconds: 4, time_limit_seconds: 3000 }),
    );
    await running(alice, stubborn);
    const coop = await approveTask(alice, rita, shellSpec(RESUMABLE, { preemptible: true }));
    await running(alice, coop);

    const claim = await approveTask(bob, rita, shellSpec('true', { cards: { count: 2 } }));
    const claimed = await waitUntilSettled(bob, claim);
    expect(claimed.state).toBe('COMPLETED');
    const second = await waitUntilSettled(alice, coop);
    expect(second.state).toBe('COMPLETED');
    expect(second.preemptions).toBe(1);
    // The cooperative victim's second run started only after its claimant had started.
    expect(Date.parse(second.started_at!)).toBeGreaterThanOrEqual(Date.parse(claimed.started_at!));
    expect((await getTask(alice, stubborn)).preemptions).toBe(1);

    for (const id of [...keep, stubborn])
      expectOk(await callTool(alice, 'cancel_task', { task_id: id, idempotency_key: m.key() }));
    for (const id of keep) await waitUntilSettled(alice, id);
  });
});
