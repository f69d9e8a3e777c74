import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskView } from '../../../src/contracts/views.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { connectRawWorker } from '../../support/raw-worker.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Operators steer the cluster through the same MCP tools: cordon/uncordon a card, drain/undrain a worker;
 * submitters cannot; the queue hides other owners; and a second session for one worker id replaces the
 * first, deterministically.
 */

interface Card {
  worker_id: string;
  index: number;
  state: string;
  cordon_reason: string | null;
  task_id: string | null;
}

let m: TestMaster;
let worker: TestWorker;
let op: Client;
let alice: Client;
let bob: Client;
let rita: Client;
let n = 0;
const key = () => `ops-${++n}`;

const cards = async (c: Client) =>
  expectOk(await callTool<{ cards: Card[] }>(c, 'list_cards', { worker_id: 'gpu-ops' })).cards;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  worker = await startWorkerOn(m, 'gpu-ops', { simCards: 2 });
  op = await m.mcpClient(m.operatorToken);
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  bob = await m.mcpClient(m.createToken('bob', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  await waitFor(
    async () => (await cards(op)).every((c) => c.state === 'AVAILABLE') && (await cards(op)).length === 2,
    {
      what: 'both cards AVAILABLE',
    },
  );
});

afterAll(async () => {
  await worker?.close();
  await m?.close();
});

describe('operator tools', () => {
  it('cordon keeps tasks off a card; uncordon returns it; submitters may not cordon', async () => {
    expectError(
      await callTool(alice, 'cordon_card', { worker_id: 'gpu-ops', index: 0, idempotency_key: key() }),
      'FORBIDDEN',
    );
    const cordoned = expectOk(
      await callTool(op, 'cordon_card', {
        worker_id: 'gpu-ops',
        index: 0,
        reason: 'fan noise',
        idempotency_key: key(),
      }),
    );
    expect(cordoned).toEqual({ worker_id: 'gpu-ops', index: 0, cordoned: true, reason: 'fan noise' });
    expect((await cards(op)).find((c) => c.index === 0)).toMatchObject({
      state: 'CORDONED',
      cordon_reason: 'fan noise',
    });

    const taskId = await approveTask(alice, rita, shellSpec('echo on $CUDA_VISIBLE_DEVICES'));
    const done = await waitUntilSettled(alice, taskId);
    expect(done.state).toBe('COMPLETED');
    expect(done.cards.map((c) => c.index)).toEqual([1]);

    // A 2-card task cannot fit while card 0 is cordoned; it waits with a reason, then runs on uncordon.
    const pair = await approveTask(alice, rita, shellSpec('true', { cards: { count: 2 } }));
    await waitFor(async () => (await getTask(alice, pair)).reason !== null, { what: 'a wait reason' });
    expect((await getTask(alice, pair)).state).toBe('QUEUED');
    expectOk(await callTool(op, 'uncordon_card', { worker_id: 'gpu-ops', index: 0, idempotency_key: key() }));
    const ran = await waitUntilSettled(alice, pair);
    expect(ran).toMatchObject({ state: 'COMPLETED' });
    expect(ran.cards.map((c) => c.index)).toEqual([0, 1]);
    expectError(
      await callTool(op, 'cordon_card', { worker_id: 'gpu-ops', index: 9, idempotency_key: key() }),
      'NOT_FOUND',
    );
  });

  it('drain keeps new tasks off a worker; undrain lets them run', async () => {
    expectOk(await callTool(op, 'drain_worker', { worker_id: 'gpu-ops', idempotency_key: key() }));
    const workers = expectOk(
      await callTool<{ workers: Array<{ worker_id: string; draining: boolean }> }>(op, 'list_workers', {}),
    );
    expect(workers.workers.find((w) => w.worker_id === 'gpu-ops')?.draining).toBe(true);
    const taskId = await approveTask(alice, rita, shellSpec('true'));
    await waitFor(async () => (await getTask(alice, taskId)).reason?.['code'] === 'workers_offline', {
      what: 'the task to wait for a drained worker',
    });
    expect((await getTask(alice, taskId)).state).toBe('QUEUED');
    expectOk(await callTool(op, 'undrain_worker', { worker_id: 'gpu-ops', idempotency_key: key() }));
    expect((await waitUntilSettled(alice, taskId)).state).toBe('COMPLETED');
  });

  it('shows other owners’ queued tasks anonymised', async () => {
    expectOk(await callTool(op, 'drain_worker', { worker_id: 'gpu-ops', idempotency_key: key() }));
    try {
      const mine = await approveTask(alice, rita, shellSpec('true'));
      const theirs = await approveTask(bob, rita, shellSpec('true'));
      await waitFor(async () => (await getTask(bob, theirs)).position !== null, { what: 'queue positions' });
      const q = expectOk(
        await callTool<{ tasks: Array<{ task_id: string | null; own: boolean; title: string | null }> }>(
          alice,
          'get_queue',
          {},
        ),
      );
      expect(q.tasks.find((t) => t.own)).toMatchObject({ task_id: mine });
      expect(q.tasks.filter((t) => !t.own).every((t) => t.task_id === null && t.title === null)).toBe(true);
      expect(JSON.stringify(q)).not.toContain(theirs);
      for (const id of [mine, theirs])
        expectOk(await callTool(op, 'cancel_task', { task_id: id, idempotency_key: key() }));
      expect((await getTask(alice, mine)).state).toBe('CANCELLED' satisfies TaskView['state']);
    } finally {
      expectOk(await callTool(op, 'undrain_worker', { worker_id: 'gpu-ops', idempotency_key: key() }));
    }
  });

  it('a second session for the same worker id replaces the first (close 4000)', async () => {
    const token = m.createToken('worker-twin', ['worker'], 'gpu-twin');
    const first = await connectRawWorker({ url: m.url, caPem: m.caPem, token, workerId: 'gpu-twin' });
    await first.hello(1);
    const second = await connectRawWorker({ url: m.url, caPem: m.caPem, token, workerId: 'gpu-twin' });
    await waitFor(() => first.closeCode() !== null, { what: 'the older session to close' });
    expect(first.closeCode()).toBe(4000);
    await second.hello(1);
    expect(second.isOpen()).toBe(true);
    await second.close();
  });

  it('forgets a retired worker only once it is offline and holds nothing', async () => {
    const retiring = await startWorkerOn(m, 'gpu-retired', { simCards: 1 });
    await waitFor(
      async () => (await cards(op)).length >= 0 && m.deps.cluster.fleet.isOnline('gpu-retired', Date.now()),
      {
        what: 'the worker online',
      },
    );
    expectError(
      await callTool(op, 'remove_worker', { worker_id: 'gpu-retired', idempotency_key: key() }),
      'INVALID_STATE',
    );
    expectError(
      await callTool(alice, 'remove_worker', { worker_id: 'gpu-retired', idempotency_key: key() }),
      'FORBIDDEN',
    );
    await retiring.close();
    m.revokeToken('worker-gpu-retired');
    await waitFor(() => !m.deps.cluster.fleet.isOnline('gpu-retired', Date.now()), {
      what: 'the worker offline',
    });
    expectOk(await callTool(op, 'remove_worker', { worker_id: 'gpu-retired', idempotency_key: key() }));
    const listed = expectOk(
      await callTool<{ workers: Array<{ worker_id: string }> }>(op, 'list_workers', {}),
    );
    expect(listed.workers.map((w) => w.worker_id)).not.toContain('gpu-retired');
    const status = expectOk(await callTool<{ alerts: Array<{ subject: string }> }>(op, 'get_status', {}));
    expect(status.alerts.some((a) => a.subject === 'gpu-retired')).toBe(false);
    expectError(
      await callTool(op, 'remove_worker', { worker_id: 'gpu-retired', idempotency_key: key() }),
      'NOT_FOUND',
    );
  });
});
