import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterEach, describe, expect, it } from 'vitest';
import type { TaskView } from '../../../src/contracts/views.js';
import {
  approveTask,
  type ClusterTiming,
  clusterConfig,
  getTask,
  type LeaseWatch,
  shellSpec,
  waitUntilSettled,
  watchLeaseCards,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { startTcpProxy, type TcpProxy } from '../../support/tcp-proxy.js';
import { makeGateDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startTestWorker, type TestWorker } from '../../support/worker.js';

/**
 * The worker's link to the master fails mid-run (a TCP proxy between them resets every connection and
 * refuses new ones). Within the grace period the task carries on and finishes; past it, the master
 * marks the task RECONCILIATION_REQUIRED and quarantines its cards until a worker report or an
 * operator decides. Nothing the worker reported is lost and no card is leased twice either way.
 */

interface Cluster {
  m: TestMaster;
  proxy: TcpProxy;
  w: TestWorker;
  alice: Client;
  rita: Client;
  op: Client;
  watch: LeaseWatch;
  gates: string;
}

let open: Cluster | null = null;

async function cluster(timing: Partial<ClusterTiming> = {}): Promise<Cluster> {
  const m = await startTestMaster({ config: clusterConfig({ timing }) });
  const watch = watchLeaseCards(m.store, m.deps.notifier);
  const proxy = await startTcpProxy(m.url);
  const w = await startTestWorker({
    url: proxy.url,
    caPem: m.caPem,
    token: m.createToken('worker-gpu-link', ['worker'], 'gpu-link'),
    workerId: 'gpu-link',
    simCards: 2,
  });
  const c: Cluster = {
    m,
    proxy,
    w,
    alice: await m.mcpClient(m.createToken('alice', ['submitter'])),
    rita: await m.mcpClient(m.createToken('rita', ['reviewer'])),
    op: await m.mcpClient(m.operatorToken),
    watch,
    gates: makeGateDir('gates'),
  };
  open = c;
  await waitFor(() => m.deps.cluster.fleet.isOnline('gpu-link', Date.now()), { what: 'gpu-link online' });
  return c;
}

afterEach(async () => {
  if (!open) return;
  const c = open;
  open = null;
  c.watch.stop();
  c.proxy.restore();
  await c.w.close();
  await c.proxy.close();
  await c.m.close();
  removeTempDirs();
});

/** A 1-card task that runs until `gate` exists, then writes a required output. */
function gatedSpec(gate: string) {
  return shellSpec(
    [
      'echo "started on $CUDA_VISIBLE_DEVICES"',
      `while [ ! -e '${gate}' ]; do sleep 0.05; done`,
      'echo done > "$GPU_BROKER_OUTPUT_DIR/result.json"',
      'echo "finished"',
    ].join('\n'),
    { outputs: [{ path: 'result.json', required: true }] },
  );
}

async function runningTask(c: Cluster, gate: string): Promise<string> {
  const id = await approveTask(c.alice, c.rita, gatedSpec(gate));
  await waitFor(async () => (await getTask(c.alice, id)).state === 'RUNNING', { what: 'task RUNNING' });
  // The started report is acknowledged, so what the worker sends after the cut is what is at stake.
  await waitFor(() => c.m.store.leases.executionForLease(leaseOf(c, id).id)?.phase === 'started');
  return id;
}

function leaseOf(c: Cluster, taskId: string) {
  return c.m.store.leases.latestLeaseForTask(taskId)!;
}

/**
 * Polls get_task until the task is `state`. wait_for_task keeps waiting on a task parked because its
 * worker fell silent (it may come back by itself), so it cannot be used to see it parked.
 */
async function untilState(c: Cluster, id: string, state: string): Promise<TaskView> {
  return waitFor(
    async () => {
      const t = await getTask(c.alice, id);
      return t.state === state ? t : null;
    },
    { what: `task ${state}` },
  );
}

async function cutAndWaitOffline(c: Cluster): Promise<void> {
  c.proxy.cut();
  await waitFor(() => !c.m.deps.cluster.fleet.isOnline('gpu-link', Date.now()), { what: 'worker offline' });
  await waitFor(() => !c.w.worker.isConnected(), { what: 'worker sees the link down' });
}

describe('worker link cut mid-run', () => {
  it('restored within grace: the task finishes, its exit and outputs arrive, the lease is released', async () => {
    const c = await cluster();
    const gate = join(c.gates, 'within');
    const id = await runningTask(c, gate);
    await cutAndWaitOffline(c);
    // The task exits while the link is down: its reports wait in the worker's outbox.
    writeFileSync(gate, '');
    const during = await getTask(c.alice, id);
    expect(during.state).toBe('RUNNING');
    expect(leaseOf(c, id).state).toBe('ACTIVE');

    c.proxy.restore();
    const done = await waitUntilSettled(c.alice, id);
    expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0, failure_reason: null });
    const logs = expectOk(await callTool<{ data: string }>(c.alice, 'get_task_logs', { task_id: id }));
    expect(logs.data).toBe('started on 0\nfinished\n');
    const outputs = expectOk(
      await callTool<{ outputs: Array<{ path: string }> }>(c.alice, 'get_task_outputs', { task_id: id }),
    );
    expect(outputs.outputs.map((o) => o.path)).toEqual(['result.json']);
    expect(leaseOf(c, id).state).toBe('RELEASED');
    expect(c.m.store.tasks.inState('RECONCILIATION_REQUIRED')).toEqual([]);
    expect(c.proxy.accepted()).toBeGreaterThan(1);
    expect(c.watch.violations).toEqual([]);
  });

  it('gone past grace: RECONCILIATION_REQUIRED, cards quarantined, reconcile_task releases them', async () => {
    const c = await cluster({ worker_offline_seconds: 1, lease_grace_seconds: 1 });
    const gate = join(c.gates, 'beyond');
    const id = await runningTask(c, gate);
    const lease = leaseOf(c, id);
    await cutAndWaitOffline(c);

    const lost = await untilState(c, id, 'RECONCILIATION_REQUIRED');
    expect(lost.state).toBe('RECONCILIATION_REQUIRED');
    expect(leaseOf(c, id).state).toBe('QUARANTINED');
    const cards = expectOk(
      await callTool<{ cards: Array<{ index: number; state: string }> }>(c.op, 'list_cards', {}),
    );
    expect(cards.cards.find((x) => x.index === lease.cards[0]!.index)?.state).toBe('QUARANTINED');
    const status = expectOk(
      await callTool<{ alerts: Array<{ kind: string; subject: string }> }>(c.op, 'get_status', {}),
    );
    expect(status.alerts.map((a) => a.kind)).toEqual(
      expect.arrayContaining(['card_quarantined', 'task_needs_reconciliation', 'worker_offline']),
    );
    // A new task cannot get the quarantined card, even once the worker is back.
    const other = await approveTask(c.alice, c.rita, shellSpec('echo other', { cards: { count: 2 } }));

    const reconciled = expectOk(
      await callTool<{ task: TaskView; lease_released: boolean }>(c.op, 'reconcile_task', {
        task_id: id,
        resolution: 'FAILED',
        reason: 'host checked: the process is gone and the card is idle',
        idempotency_key: `reconcile-${id}`,
      }),
    );
    expect(reconciled.lease_released).toBe(true);
    expect(reconciled.task).toMatchObject({ state: 'FAILED', failure_reason: 'WORKER_LOST' });
    expect(leaseOf(c, id).state).toBe('RELEASED');
    // The live execution was given up through its table too (`reconcile`, audited).
    const reconciledExecution = c.m.store.leases.executionForLease(lease.id)!;
    expect(reconciledExecution.phase).toBe('cleanup_failed');
    expect(c.m.store.audit.forSubject('execution', reconciledExecution.id).at(-1)).toMatchObject({
      action: 'execution.reconcile',
      data: expect.objectContaining({ from: 'started', to: 'cleanup_failed' }),
    });
    expect((await getTask(c.alice, other)).state).toBe('QUEUED');

    // The worker comes back; its late reports about the reconciled execution change nothing.
    writeFileSync(gate, '');
    c.proxy.restore();
    const ran = await waitUntilSettled(c.alice, other);
    expect(ran.state).toBe('COMPLETED');
    expect((await getTask(c.alice, id)).state).toBe('FAILED');
    expect(c.m.store.audit.forSubject('task', id).map((e) => e.action)).toEqual([
      'task.created',
      'task.lease_granted',
      'task.started',
      'task.worker_lost',
      'task.reconcile_failed',
      'task.reconciled',
    ]);
    expect(c.watch.violations).toEqual([]);
  });

  it('gone past grace, then back: the worker’s own report settles the task and frees the cards', async () => {
    const c = await cluster({ worker_offline_seconds: 1, lease_grace_seconds: 1 });
    const gate = join(c.gates, 'back');
    const id = await runningTask(c, gate);
    await cutAndWaitOffline(c);
    await untilState(c, id, 'RECONCILIATION_REQUIRED');
    expect(leaseOf(c, id).state).toBe('QUARANTINED');

    writeFileSync(gate, '');
    c.proxy.restore();
    // Poll for the worker's verdict: the task passes through RUNNING again (docs/operations.md "Partitions").
    const done = await waitFor(
      async () => {
        const t = await getTask(c.alice, id);
        return ['COMPLETED', 'FAILED', 'CANCELLED'].includes(t.state) ? t : null;
      },
      { what: 'the worker report settling the task' },
    );
    expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    expect(leaseOf(c, id)).toMatchObject({ state: 'RELEASED' });
    expect(c.watch.violations).toEqual([]);
  });
});

describe('an assign that never arrived', () => {
  it('is withdrawn by the master once the worker is offline (docs/operations.md "Partitions"), and never delivered', async () => {
    // Cards stay fresh for 1.5 s and the worker online for 2 s after the link is held: time enough for
    // the grant to be made into the black hole.
    const c = await cluster({ sample_interval_ms: 500, worker_offline_seconds: 2, lease_grace_seconds: 1 });
    const gate = join(c.gates, 'never');
    // The link black-holes, then the master grants a task: its assign never reaches the worker.
    c.proxy.hold();
    const lost = await approveTask(c.alice, c.rita, {
      ...gatedSpec(gate),
      cards: { count: 2 },
      title: 'lost',
    });
    await waitFor(async () => (await getTask(c.alice, lost)).state === 'ASSIGNED', { what: 'lost assigned' });
    const first = leaseOf(c, lost);
    c.proxy.cut();
    // The worker never acknowledged accepting it, and starts nothing unacknowledged: the master takes
    // the assign back and requeues the task instead of parking it for an operator.
    await untilState(c, lost, 'QUEUED');
    expect(c.m.store.leases.lease(first.id)?.state).toBe('RELEASED');
    // Its owner gives up on it while it waits.
    expectOk(await callTool(c.alice, 'cancel_task', { task_id: lost, idempotency_key: `cancel-${lost}` }));
    const next = await approveTask(c.alice, c.rita, {
      ...shellSpec('echo next on $CUDA_VISIBLE_DEVICES'),
      cards: { count: 2 },
    });
    writeFileSync(gate, '');
    c.proxy.restore();
    expect(await waitUntilSettled(c.alice, next)).toMatchObject({ state: 'COMPLETED' });
    // The withdrawn assign never ran on the cards the next one was given.
    const lostExec = c.m.store.leases.executionForLease(first.id)!;
    expect(lostExec.phase).toBe('rejected');
    expect(existsSync(join(c.w.dataDir, 'executions', lostExec.id))).toBe(false);
    expect((await getTask(c.alice, lost)).state).toBe('CANCELLED');
    expect(c.watch.violations).toEqual([]);
  });
});

describe('a worker that comes back without its records', () => {
  it('cannot account for a running execution: RECONCILIATION_REQUIRED and quarantine, not RUNNING for ever', async () => {
    const c = await cluster();
    const id = await runningTask(c, join(c.gates, 'amnesia'));
    // The host loses the worker's data dir: the old process goes away unheard, a new one starts empty.
    c.proxy.cut();
    await c.w.close();
    c.proxy.restore();
    c.w = await startTestWorker({
      url: c.proxy.url,
      caPem: c.m.caPem,
      token: c.m.createToken('worker-gpu-link-2', ['worker'], 'gpu-link'),
      workerId: 'gpu-link',
      simCards: 2,
    });
    await waitFor(() => c.w.worker.isConnected(), { what: 'the new worker connected' });
    const lost = await waitUntilSettled(c.alice, id);
    expect(lost.state).toBe('RECONCILIATION_REQUIRED');
    expect(leaseOf(c, id).state).toBe('QUARANTINED');
    // The master asked, and it was the worker's answer, not the grace period, that settled it.
    expect(c.m.deps.cluster.fleet.isOnline('gpu-link', Date.now())).toBe(true);
    const lostEvent = c.m.store.audit.forSubject('task', id).find((e) => e.action === 'task.worker_lost');
    expect(lostEvent?.data).toMatchObject({ reason: expect.stringContaining('not known to the worker') });
    expect(c.watch.violations).toEqual([]);
  });
});
