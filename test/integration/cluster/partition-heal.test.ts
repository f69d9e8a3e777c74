import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterEach, describe, expect, it } from 'vitest';
import { sweepExecutions } from '../../../src/broker/loops/liveness.js';
import type { CardSample } from '../../../src/contracts/sample.js';
import type { TaskSummary, TaskView } from '../../../src/contracts/views.js';
import type { CardSampler } from '../../../worker/samplers/card-sampler.js';
import { AdvancingClock } from '../../support/advancing-clock.js';
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
 * docs/operations.md "Partitions": after a network partition the system heals itself. A TCP proxy on loopback between a real
 * worker and a real master black-holes the link (`hold`: nothing is forwarded, nothing is closed), so
 * the master hears silence; the heal resets the held sockets and lets the worker dial again.
 *  - item 1: a task still running when its worker returns goes back to RUNNING (lease ACTIVE, alerts
 *    gone), and its views say what happened;
 *  - item 2: a partition between a task's exit report and its cleanup receipt never fails a task that
 *    exited 0: the receipt deadline runs only while the worker is reachable.
 */

const WORKER = 'gpu-part';

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

async function cluster(
  timing: Partial<ClusterTiming> = {},
  sampler?: CardSampler,
  clock?: AdvancingClock,
): Promise<Cluster> {
  const m = await startTestMaster({ config: clusterConfig({ timing }), ...(clock ? { clock } : {}) });
  const watch = watchLeaseCards(m.store, m.deps.notifier);
  const proxy = await startTcpProxy(m.url);
  const w = await startTestWorker({
    url: proxy.url,
    caPem: m.caPem,
    token: m.createToken(`worker-${WORKER}`, ['worker'], WORKER),
    workerId: WORKER,
    simCards: 2,
    ...(sampler ? { sampler } : {}),
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
  await waitFor(() => m.deps.cluster.fleet.isOnline(WORKER, Date.now()), { what: `${WORKER} online` });
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

/** A 1-card task that runs until `gate` exists. */
function gatedSpec(gate: string) {
  return shellSpec(`echo started; while [ ! -e '${gate}' ]; do sleep 0.05; done; echo finished`);
}

function leaseOf(c: Cluster, taskId: string) {
  return c.m.store.leases.latestLeaseForTask(taskId)!;
}

async function runningTask(c: Cluster, gate: string): Promise<string> {
  const id = await approveTask(c.alice, c.rita, gatedSpec(gate));
  await waitFor(async () => (await getTask(c.alice, id)).state === 'RUNNING', { what: 'task RUNNING' });
  await waitFor(() => c.m.store.leases.executionForLease(leaseOf(c, id).id)?.phase === 'started');
  return id;
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

/** The partition starts: the link black-holes; the master hears nothing more from the worker. */
async function partition(c: Cluster): Promise<void> {
  c.proxy.hold();
  await waitFor(() => !c.m.deps.cluster.fleet.isOnline(WORKER, Date.now()), { what: 'worker offline' });
}

/** The partition heals: the held sockets are reset and the worker dials again. */
async function heal(c: Cluster): Promise<void> {
  c.proxy.cut();
  c.proxy.restore();
  await waitFor(() => c.m.deps.cluster.fleet.isOnline(WORKER, Date.now()), { what: 'worker back online' });
}

async function alertKinds(c: Cluster): Promise<string[]> {
  const status = expectOk(await callTool<{ alerts: Array<{ kind: string }> }>(c.op, 'get_status', {}));
  return status.alerts.map((a) => a.kind);
}

describe('item 1: a worker that returns with its task alive', () => {
  it('takes the task back to RUNNING and the lease to ACTIVE, clears the alerts, says what happened', async () => {
    const c = await cluster({ worker_offline_seconds: 1, lease_grace_seconds: 1 });
    const gate = join(c.gates, 'alive');
    const id = await runningTask(c, gate);
    const lease = leaseOf(c, id);
    await partition(c);

    const lost = await untilState(c, id, 'RECONCILIATION_REQUIRED');
    // A waiter is not told "settled": the task may come back by itself.
    const waited = expectOk(
      await callTool<{ task: TaskView; timed_out: boolean }>(c.alice, 'wait_for_task', {
        task_id: id,
        timeout_seconds: 1,
      }),
    );
    expect(waited).toMatchObject({ timed_out: true, task: { state: 'RECONCILIATION_REQUIRED' } });
    expect(lost.reason).toMatchObject({ code: 'worker_unreachable', worker_id: WORKER });
    expect(lost.next_action).toContain('goes back to RUNNING by itself');
    expect(leaseOf(c, id).state).toBe('QUARANTINED');
    // Item 5: the operator is told to wait for the worker before any reconcile.
    const during = expectOk(
      await callTool<{ alerts: Array<{ kind: string; message: string; action: string }> }>(
        c.op,
        'get_status',
        {},
      ),
    );
    for (const kind of ['card_quarantined', 'task_needs_reconciliation']) {
      const alert = during.alerts.find((a) => a.kind === kind);
      expect(alert?.message).toContain(`worker ${WORKER} is unreachable since`);
      expect(alert?.action).toMatch(new RegExp(`^Wait for ${WORKER}: if it comes back listing the task`));
    }

    await heal(c);
    const back = await waitFor(
      async () => {
        const t = await getTask(c.alice, id);
        return t.state === 'RUNNING' ? t : null;
      },
      { what: 'the task back to RUNNING' },
    );
    // The process never stopped: the gate is still closed, so only the hello can have moved it.
    expect(back.reason).toMatchObject({ code: 'worker_returned', worker_id: WORKER });
    expect(back.reason?.message).toMatch(
      new RegExp(`^worker ${WORKER} was unreachable for \\d+ s; the task kept running$`),
    );
    expect(back.next_action).toMatch(
      /^Worker gpu-part was unreachable for \d+ s; the task kept running\. Running;/,
    );
    const listed = expectOk(await callTool<{ tasks: TaskSummary[] }>(c.alice, 'list_tasks', {}));
    expect(listed.tasks.find((t) => t.task_id === id)).toMatchObject({
      state: 'RUNNING',
      reason: expect.objectContaining({ code: 'worker_returned' }),
    });
    expect(leaseOf(c, id)).toMatchObject({ id: lease.id, state: 'ACTIVE', lease_epoch: lease.lease_epoch });
    const cards = expectOk(
      await callTool<{ cards: Array<{ index: number; state: string }> }>(c.op, 'list_cards', {}),
    );
    expect(cards.cards.find((x) => x.index === lease.cards[0]!.index)?.state).toBe('LEASED');
    const kinds = await alertKinds(c);
    expect(kinds).not.toContain('card_quarantined');
    expect(kinds).not.toContain('task_needs_reconciliation');
    // Nothing is left to reconcile: the task runs.
    const refused = await callTool(c.op, 'reconcile_task', {
      task_id: id,
      resolution: 'FAILED',
      reason: 'the alert said so',
      idempotency_key: `reconcile-${id}`,
    });
    expect(refused).toMatchObject({ ok: false, error: { code: 'INVALID_STATE' } });
    // Audited, each move through its table, fenced by the lease's epoch.
    expect(c.m.store.audit.forSubject('task', id).map((e) => e.action)).toEqual([
      'task.created',
      'task.lease_granted',
      'task.started',
      'task.worker_lost',
      'task.worker_returned',
    ]);
    expect(c.m.store.audit.forSubject('lease', lease.id).at(-1)).toMatchObject({
      action: 'lease.worker_returned',
      data: expect.objectContaining({ from: 'QUARANTINED', to: 'ACTIVE', lease_epoch: lease.lease_epoch }),
    });

    writeFileSync(gate, '');
    expect(await waitUntilSettled(c.alice, id)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    expect(leaseOf(c, id).state).toBe('RELEASED');
    const logs = expectOk(await callTool<{ data: string }>(c.alice, 'get_task_logs', { task_id: id }));
    expect(logs.data).toBe('started\nfinished\n');
    expect(c.watch.violations).toEqual([]);
  });
});

describe('item 1 across a master restart inside the partition', () => {
  it('the restarted master resumes the parked task when the worker returns', async () => {
    const c = await cluster({ worker_offline_seconds: 1, lease_grace_seconds: 1 });
    const gate = join(c.gates, 'restart');
    const id = await runningTask(c, gate);
    const lease = leaseOf(c, id);
    await partition(c);
    await untilState(c, id, 'RECONCILIATION_REQUIRED');

    // The master restarts on the same port and data dir while the link is still down (reset first: a
    // held socket would keep the old master's close waiting for its close handshake).
    c.proxy.cut();
    c.watch.stop();
    c.m = await c.m.restart();
    c.watch = watchLeaseCards(c.m.store, c.m.deps.notifier);
    const op = await c.m.mcpClient(c.m.operatorToken);
    expect(c.m.store.tasks.get(id)?.state).toBe('RECONCILIATION_REQUIRED');

    await heal(c);
    const back = await waitFor(
      async () => {
        const t = await getTask(op, id);
        return t.state === 'RUNNING' ? t : null;
      },
      { what: 'the task back to RUNNING on the restarted master' },
    );
    expect(back.reason).toMatchObject({ code: 'worker_returned', worker_id: WORKER });
    expect(c.m.store.leases.lease(lease.id)?.state).toBe('ACTIVE');

    writeFileSync(gate, '');
    expect(await waitUntilSettled(op, id)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    expect(c.watch.violations).toEqual([]);
  });
});

describe('item 3: an assign sent into the partition, with no other worker', () => {
  it('is withdrawn and requeued; after the heal the worker runs it once, on a fresh lease', async () => {
    // Cards stay fresh for 1.5 s and the worker online for 2 s after the link is held: time enough for
    // the grant to be made into the black hole.
    const c = await cluster({ sample_interval_ms: 500, worker_offline_seconds: 2, lease_grace_seconds: 1 });
    const gate = join(c.gates, 'late-assign');
    c.proxy.hold();
    const id = await approveTask(c.alice, c.rita, gatedSpec(gate));
    await waitFor(async () => (await getTask(c.alice, id)).state === 'ASSIGNED', { what: 'task ASSIGNED' });
    const first = leaseOf(c, id);
    // The worker never acknowledged accepting it: the master takes it back rather than park it.
    await untilState(c, id, 'QUEUED');
    expect(c.m.store.leases.lease(first.id)?.state).toBe('RELEASED');
    expect(c.m.store.tasks.inState('RECONCILIATION_REQUIRED')).toEqual([]);

    writeFileSync(gate, '');
    await heal(c);
    const done = await waitUntilSettled(c.alice, id);
    expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0, worker_id: WORKER });
    expect(leaseOf(c, id).id).not.toBe(first.id);
    const logs = expectOk(await callTool<{ data: string }>(c.alice, 'get_task_logs', { task_id: id }));
    expect(logs.data).toBe('started\nfinished\n');
    expect(c.m.store.audit.forSubject('task', id).map((e) => e.action)).toEqual([
      'task.created',
      'task.lease_granted',
      'task.requeued',
      'task.lease_granted',
      'task.started',
      'task.exited',
      'task.cleaned_success',
    ]);
    expect(c.watch.violations).toEqual([]);
  });
});

/**
 * Idle "real" cards whose sampling the test can stall: a cleanup receipt on real cards waits for a fresh
 * sample showing them idle, so stalling the sampler holds the receipt back after the exit report went out.
 */
class StallableSampler implements CardSampler {
  readonly provider = 'nvidia' as const;
  private gate: Promise<void> | null = null;
  private open: () => void = () => {};

  hold(): void {
    this.gate ??= new Promise((resolve) => {
      this.open = resolve;
    });
  }

  release(): void {
    this.open();
    this.gate = null;
  }

  async sample(): Promise<CardSample[]> {
    if (this.gate) await this.gate;
    return [0, 1].map((index) => ({
      index,
      uuid: `GPU-part-${index}`,
      model: 'NVIDIA H100 80GB HBM3',
      memory_used_mib: 1,
      memory_total_mib: 81559,
      utilization_pct: 0,
      temperature_c: 30,
      power_w: 70,
      health: 'ok',
      health_reasons: [],
      processes: [],
      simulated: false,
    }));
  }
}

describe('item 2: a partition between the exit report and the cleanup receipt', () => {
  it('does not fail a task that exited 0: the receipt deadline waits for the worker to be reachable', async () => {
    const sampler = new StallableSampler();
    // The receipt deadline is cleanup timeout + 2 offline windows = 3 s after the exit; grace is long,
    // so the task stays FINALIZING through the partition. The master's clock is moved past the deadline
    // rather than waited for.
    const clock = new AdvancingClock();
    const c = await cluster(
      { worker_offline_seconds: 1, cleanup_timeout_seconds: 1, lease_grace_seconds: 60 },
      sampler,
      clock,
    );
    try {
      const gate = join(c.gates, 'exit');
      const id = await runningTask(c, gate);
      const lease = leaseOf(c, id);
      sampler.hold();
      writeFileSync(gate, '');
      await waitFor(async () => (await getTask(c.alice, id)).state === 'FINALIZING', {
        what: 'the exit report',
      });
      const exitedAt = c.m.store.leases.executionForLease(lease.id)!.updated_at;
      // The partition starts between the two messages; the receipt is made while the link is held.
      await partition(c);
      sampler.release();
      const window = (1 + 2 * 1) * 1000;
      clock.advance(Math.max(0, exitedAt + window + 1500 - clock.now()));
      // The sweep's deadline step, at once, on the master's (moved) clock; its own ticks follow.
      sweepExecutions(c.m.deps, c.m.deps.cluster.fleet);
      expect(clock.now()).toBeGreaterThan(exitedAt + window);
      expect((await getTask(c.alice, id)).state).toBe('FINALIZING');
      expect(leaseOf(c, id).state).toBe('RELEASING');

      await heal(c);
      const done = await waitUntilSettled(c.alice, id);
      expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0, failure_reason: null });
      expect(leaseOf(c, id).state).toBe('RELEASED');
      expect(c.m.store.audit.forSubject('task', id).map((e) => e.action)).not.toContain(
        'task.cleanup_failed',
      );
      expect(c.watch.violations).toEqual([]);
    } finally {
      sampler.release();
    }
  });
});
