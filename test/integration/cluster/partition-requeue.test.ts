import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import {
  approveTask,
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
import { removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startTestWorker, startWorkerOn, type TestWorker, workerStorePath } from '../../support/worker.js';

/**
 * docs/operations.md "Partitions": work assigned into a partition does not wait out the partition. A worker starts an
 * accepted execution only once the master acknowledged its acceptance, so when the master never heard
 * the acceptance and the worker falls silent, the master withdraws the assign and requeues the task for
 * another worker (fenced by epoch, no new review) — and the partitioned worker never runs it, even when
 * the assign did reach it. The far worker's own store shows it never started it; the task's log shows
 * the one run.
 */

const FAR = 'gpu-far';
const NEAR = 'gpu-near';

interface Cluster {
  m: TestMaster;
  proxy: TcpProxy;
  far: TestWorker;
  near: TestWorker | null;
  alice: Client;
  rita: Client;
  watch: LeaseWatch;
}

let open: Cluster | null = null;

afterEach(async () => {
  if (!open) return;
  const c = open;
  open = null;
  c.watch.stop();
  c.proxy.restore();
  await c.far.close();
  await c.near?.close();
  await c.proxy.close();
  await c.m.close();
  removeTempDirs();
});

/** A master and one worker (`gpu-far`) behind a proxy; the second worker comes later. */
async function cluster(): Promise<Cluster> {
  // Cards stay fresh for 1.5 s and the worker online for 2 s once its link is held: time for the grant.
  const m = await startTestMaster({
    config: clusterConfig({
      timing: { sample_interval_ms: 500, worker_offline_seconds: 2, lease_grace_seconds: 60 },
    }),
  });
  const watch = watchLeaseCards(m.store, m.deps.notifier);
  const proxy = await startTcpProxy(m.url);
  const far = await startTestWorker({
    url: proxy.url,
    caPem: m.caPem,
    token: m.createToken(`worker-${FAR}`, ['worker'], FAR),
    workerId: FAR,
    simCards: 1,
  });
  const c: Cluster = {
    m,
    proxy,
    far,
    near: null,
    alice: await m.mcpClient(m.createToken('alice', ['submitter'])),
    rita: await m.mcpClient(m.createToken('rita', ['reviewer'])),
    watch,
  };
  open = c;
  await waitFor(() => m.deps.cluster.fleet.isOnline(FAR, Date.now()), { what: `${FAR} online` });
  await waitFor(() => m.deps.cluster.fleet.get(FAR).cards.length === 1, { what: `${FAR} sampled` });
  return c;
}

/** A task that says which worker runs it. */
const RECORDING = shellSpec('echo "ran on $GPU_BROKER_WORKER_ID"');

/** The task's stdout as the master holds it. */
async function logsOf(c: Cluster, id: string): Promise<string> {
  return expectOk(await callTool<{ data: string }>(c.alice, 'get_task_logs', { task_id: id })).data;
}

/** What the far worker's own store says about an execution: its phase, and whether it ever started. */
function farRecord(c: Cluster, executionId: string): { phase: string; pgid: number | null } | undefined {
  const db = new Database(workerStorePath(c.far.dataDir), { readonly: true, fileMustExist: true });
  try {
    return db.prepare('SELECT phase, pgid FROM executions WHERE execution_id = ?').get(executionId) as
      | { phase: string; pgid: number | null }
      | undefined;
  } finally {
    db.close();
  }
}

describe('an assign made into a partition', () => {
  it('that reached the worker, whose acceptance was lost: withdrawn, requeued, run once elsewhere', async () => {
    const c = await cluster();
    // The worker's messages stop reaching the master; the master's still reach the worker.
    c.proxy.holdFromClient();
    const id = await approveTask(c.alice, c.rita, RECORDING);
    await waitFor(async () => (await getTask(c.alice, id)).worker_id === FAR, { what: `assigned to ${FAR}` });
    const first = c.m.store.leases.latestLeaseForTask(id)!;
    const firstExecution = c.m.store.leases.executionForLease(first.id)!;
    // The assign reached the worker: it recorded the acceptance, and waits for the master to hear it.
    await waitFor(() => farRecord(c, firstExecution.id) !== undefined, { what: 'the far worker accepted' });

    // The master hears nothing, counts the worker offline and takes the assign back.
    await waitFor(() => c.m.store.leases.lease(first.id)?.state === 'RELEASED', {
      what: 'the assign withdrawn',
    });
    expect(c.m.store.leases.execution(firstExecution.id)).toMatchObject({ phase: 'rejected' });
    expect((await getTask(c.alice, id)).state).toBe('QUEUED');

    // Another worker runs it, with no new review.
    c.near = await startWorkerOn(c.m, NEAR, { simCards: 1 });
    const done = await waitUntilSettled(c.alice, id);
    expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0, worker_id: NEAR });
    expect(c.m.store.leases.latestLeaseForTask(id)!.id).not.toBe(first.id);

    // The partition heals: the far worker learns the assign was withdrawn and ends it unstarted.
    c.proxy.cut();
    c.proxy.restore();
    await waitFor(() => farRecord(c, firstExecution.id)?.phase === 'cleaned', {
      what: 'the far worker ending the withdrawn execution',
    });
    expect(farRecord(c, firstExecution.id)).toMatchObject({ phase: 'cleaned', pgid: null });
    await waitFor(() => c.m.deps.cluster.fleet.isOnline(FAR, Date.now()), { what: `${FAR} back` });
    expect(await logsOf(c, id)).toBe(`ran on ${NEAR}\n`);
    expect(c.m.store.audit.forSubject('task', id).map((e) => e.action)).toEqual([
      'task.created',
      'task.lease_granted',
      'task.requeued',
      'task.lease_granted',
      'task.started',
      'task.exited',
      'task.cleaned_success',
    ]);
    expect((await getTask(c.alice, id)).state).toBe('COMPLETED');
    expect(c.watch.violations).toEqual([]);
  });

  it('that never reached the worker: withdrawn and run elsewhere; the worker never gets it', async () => {
    const c = await cluster();
    c.proxy.hold();
    const id = await approveTask(c.alice, c.rita, RECORDING);
    await waitFor(async () => (await getTask(c.alice, id)).worker_id === FAR, { what: `assigned to ${FAR}` });
    const first = c.m.store.leases.latestLeaseForTask(id)!;
    const firstExecution = c.m.store.leases.executionForLease(first.id)!;
    await waitFor(() => c.m.store.leases.lease(first.id)?.state === 'RELEASED', {
      what: 'the assign withdrawn',
    });

    c.near = await startWorkerOn(c.m, NEAR, { simCards: 1 });
    expect(await waitUntilSettled(c.alice, id)).toMatchObject({ state: 'COMPLETED', worker_id: NEAR });
    c.proxy.cut();
    c.proxy.restore();
    await waitFor(() => c.m.deps.cluster.fleet.isOnline(FAR, Date.now()), { what: `${FAR} back` });
    // Its first sample after the hello: the session is fully up, and the withdrawn assign was not resent.
    const seen = c.m.deps.cluster.fleet.get(FAR).sampled_at!;
    await waitFor(() => (c.m.deps.cluster.fleet.get(FAR).sampled_at ?? 0) > seen, {
      what: `${FAR} sampling`,
    });
    expect(farRecord(c, firstExecution.id)).toBeUndefined();
    expect(await logsOf(c, id)).toBe(`ran on ${NEAR}\n`);
    expect(c.watch.violations).toEqual([]);
  });
});
