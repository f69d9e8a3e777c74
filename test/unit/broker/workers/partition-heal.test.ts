import { afterEach, describe, expect, it } from 'vitest';
import { sweepExecutions } from '../../../../src/broker/loops/liveness.js';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { handleExecutionReport } from '../../../../src/broker/workers/reports.js';
import { acceptHello } from '../../../../src/broker/workers/session.js';
import { BrokerError } from '../../../../src/contracts/errors.js';
import {
  HelloSchema,
  PROTOCOL_VERSION,
  type WorkerMessage,
} from '../../../../src/contracts/worker-protocol.js';
import type { ExecutionPhase } from '../../../../src/domain/machines/execution.js';
import type { ExecutionRecord } from '../../../../src/store/leases-repo.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { enrolledCluster, samples, WORKER } from '../../../support/enrolled-cluster.js';

/**
 * docs/operations.md "Partitions" at the broker's use cases, on a real in-memory store and a manual clock (the cluster tests in
 * test/integration/cluster/partition-heal.test.ts run the same story over a real link):
 *  - item 1: the sweeper parks a silent worker's task, the worker's hello resumes it — only under the
 *    lease's epoch, only for silence;
 *  - item 5: reconcile refuses a task whose worker is online and still runs it, unless `force`, and the
 *    alerts say whether the worker is back and the task alive before suggesting a reconcile.
 */

type Hello = Extract<WorkerMessage, { type: 'hello' }>;

let f: BrokerFixture | undefined;
afterEach(() => f?.close());

/** A hello as the hub hands it on: parsed, so every field a worker may leave out has its default. */
function hello(bootId: string, executions: Hello['executions'], over: Partial<Hello> = {}): Hello {
  return HelloSchema.parse({
    type: 'hello',
    protocol_version: PROTOCOL_VERSION,
    worker_id: WORKER,
    boot_id: bootId,
    version: '0',
    hostname: 'host',
    provider: 'sim',
    cards: samples,
    executions,
    master_marks: [],
    card_epochs: [],
    isolation: 'bwrap',
    container_engine: null,
    mounts: [],
    backend: 'local',
    slurm: null,
    seccomp: null,
    ...over,
  });
}

function listed(fx: BrokerFixture, e: ExecutionRecord, phase: Exclude<ExecutionPhase, 'assigned'>) {
  const cards = fx.deps.store.leases.lease(e.lease_id)!.cards.map((c) => c.index);
  return { execution_id: e.id, task_id: e.task_id, lease_epoch: e.lease_epoch, phase, cards };
}

function report(fx: BrokerFixture, e: ExecutionRecord, phase: Exclude<ExecutionPhase, 'assigned'>) {
  fx.deps.store.transaction(() => {
    try {
      fx.deps.store.transaction(() =>
        handleExecutionReport(fx.deps, WORKER, {
          type: 'execution',
          protocol_version: PROTOCOL_VERSION,
          boot_id: 'boot-1',
          seq: 1,
          execution_id: e.id,
          task_id: e.task_id,
          lease_epoch: e.lease_epoch,
          phase,
        }),
      );
    } catch (err) {
      if (!(err instanceof BrokerError)) throw err;
    }
  });
}

/** One task granted, its worker connected (the assign acknowledged) and the task RUNNING. */
async function running() {
  const c = await enrolledCluster([1]);
  f = c.f;
  new Scheduler(c.f.deps, c.f.deps.cluster.fleet, c.f.deps.cluster.link).runPass();
  const [e] = c.f.deps.store.leases.unfinishedForWorker(WORKER);
  const [assign] = c.f.deps.store.outbox.unacked(WORKER);
  acceptHello(
    c.f.deps,
    WORKER,
    hello('boot-1', [listed(c.f, e!, 'accepted')], {
      master_marks: [{ boot_id: assign!.boot_id, seq: assign!.seq }],
    }),
    c.clock.now(),
  );
  report(c.f, e!, 'accepted');
  report(c.f, e!, 'started');
  const fresh = c.f.deps.store.leases.execution(e!.id)!;
  expect(c.f.deps.store.tasks.get(fresh.task_id)?.state).toBe('RUNNING');
  return { ...c, e: fresh };
}

/** The worker falls silent past grace: the sweeper parks its task. */
function silencePastGrace(fx: BrokerFixture, clock: { advance(ms: number): void; now(): number }) {
  const { worker_offline_seconds, lease_grace_seconds } = fx.deps.config.timing;
  clock.advance((worker_offline_seconds + 1) * 1000);
  sweepExecutions(fx.deps, fx.deps.cluster.fleet);
  clock.advance((lease_grace_seconds + 1) * 1000);
  sweepExecutions(fx.deps, fx.deps.cluster.fleet);
}

const states = (fx: BrokerFixture, e: ExecutionRecord) => ({
  task: fx.deps.store.tasks.get(e.task_id)!.state,
  lease: fx.deps.store.leases.lease(e.lease_id)!.state,
});

describe('item 1: the sweeper parks a silent worker’s task, its hello resumes it', () => {
  it('resumes RUNNING/ACTIVE with the outage in the task reason, audited', async () => {
    const { f: fx, clock, e } = await running();
    silencePastGrace(fx, clock);
    expect(states(fx, e)).toEqual({ task: 'RECONCILIATION_REQUIRED', lease: 'QUARANTINED' });
    expect(fx.deps.store.tasks.get(e.task_id)!.reason).toMatchObject({ code: 'worker_unreachable' });

    clock.advance(30_000);
    acceptHello(fx.deps, WORKER, hello('boot-1', [listed(fx, e, 'started')]), clock.now());
    expect(states(fx, e)).toEqual({ task: 'RUNNING', lease: 'ACTIVE' });
    const { worker_offline_seconds, lease_grace_seconds } = fx.deps.config.timing;
    const silent = worker_offline_seconds + 1 + lease_grace_seconds + 1 + 30;
    expect(fx.deps.store.tasks.get(e.task_id)!.reason).toMatchObject({
      code: 'worker_returned',
      unreachable_seconds: silent,
      message: `worker ${WORKER} was unreachable for ${silent} s; the task kept running`,
    });
    expect(fx.deps.store.audit.forSubject('task', e.task_id).at(-1)).toMatchObject({
      action: 'task.worker_returned',
      data: expect.objectContaining({ from: 'RECONCILIATION_REQUIRED', to: 'RUNNING' }),
    });
  });

  it('does not resume under another epoch, nor a task parked for an illegal report', async () => {
    const { f: fx, clock, e } = await running();
    silencePastGrace(fx, clock);
    acceptHello(
      fx.deps,
      WORKER,
      hello('boot-1', [{ ...listed(fx, e, 'started'), lease_epoch: e.lease_epoch + 1 }]),
      clock.now(),
    );
    expect(states(fx, e)).toEqual({ task: 'RECONCILIATION_REQUIRED', lease: 'QUARANTINED' });

    const other = await running();
    report(other.f, other.e, 'rejected'); // illegal after started: the worker and the master disagree
    expect(states(other.f, other.e)).toEqual({ task: 'RECONCILIATION_REQUIRED', lease: 'QUARANTINED' });
    acceptHello(
      other.f.deps,
      WORKER,
      hello('boot-2', [listed(other.f, other.e, 'started')]),
      other.clock.now(),
    );
    expect(states(other.f, other.e)).toEqual({ task: 'RECONCILIATION_REQUIRED', lease: 'QUARANTINED' });
    fx.close();
  });
});

describe('item 5: what an operator is told matches what is safe', () => {
  /** A RUNNING task its worker disagrees about (an illegal report), the worker online and still running it. */
  async function disputedButAlive() {
    const c = await running();
    report(c.f, c.e, 'rejected');
    expect(states(c.f, c.e)).toEqual({ task: 'RECONCILIATION_REQUIRED', lease: 'QUARANTINED' });
    // The worker is online and its hello says the execution still holds its cards.
    acceptHello(c.f.deps, WORKER, hello('boot-2', [listed(c.f, c.e, 'started')]), c.clock.now());
    return c;
  }

  it('reconcile refuses a task whose online worker still runs it, naming what it would kill', async () => {
    const { f: fx, e } = await disputedButAlive();
    const op = fx.principal('op', ['operator']);
    const refused = await fx
      .invoke(op, 'reconcile_task', {
        task_id: e.task_id,
        resolution: 'FAILED',
        reason: 'looks stuck',
        idempotency_key: 'r-1',
      })
      .then(
        () => null,
        (err: unknown) => err,
      );
    expect(refused).toBeInstanceOf(BrokerError);
    expect(refused).toMatchObject({
      code: 'INVALID_STATE',
      message: expect.stringContaining(`worker ${WORKER} is online and still runs execution ${e.id}`),
      hint: expect.stringContaining('force'),
      details: expect.objectContaining({ execution_id: e.id, would_kill: true }),
    });
    expect(states(fx, e)).toEqual({ task: 'RECONCILIATION_REQUIRED', lease: 'QUARANTINED' });
    expect(fx.deps.store.outbox.unacked(WORKER).map((o) => o.body.type)).not.toContain('cancel');

    const forced = (await fx.invoke(op, 'reconcile_task', {
      task_id: e.task_id,
      resolution: 'FAILED',
      reason: 'must go',
      force: true,
      idempotency_key: 'r-2',
    })) as { lease_released: boolean };
    expect(forced.lease_released).toBe(true);
    expect(states(fx, e)).toEqual({ task: 'FAILED', lease: 'RELEASED' });
    expect(fx.deps.store.outbox.unacked(WORKER).map((o) => o.body)).toContainEqual(
      expect.objectContaining({ type: 'cancel', execution_id: e.id }),
    );
    expect(fx.deps.store.audit.forSubject('task', e.task_id).at(-1)).toMatchObject({
      action: 'task.reconciled',
      data: expect.objectContaining({ execution: 'running', force: true }),
    });
  });

  it('the alerts say the worker is back and the task alive, and advise against reconciling', async () => {
    const { f: fx } = await disputedButAlive();
    const status = (await fx.invoke(fx.principal('op', ['operator']), 'get_status', {})) as {
      alerts: Array<{ kind: string; message: string; action: string }>;
    };
    for (const kind of ['card_quarantined', 'task_needs_reconciliation']) {
      const alert = status.alerts.find((a) => a.kind === kind)!;
      expect(alert.message).toContain(`worker ${WORKER} is online and still runs the task`);
      expect(alert.action).toMatch(/^Do not reconcile: that would kill a live task/);
    }
  });

  it('while the worker is unreachable, the alerts say so and advise waiting before any reconcile', async () => {
    const { f: fx, clock } = await running();
    silencePastGrace(fx, clock);
    const status = (await fx.invoke(fx.principal('op', ['operator']), 'get_status', {})) as {
      alerts: Array<{ kind: string; message: string; action: string }>;
    };
    for (const kind of ['card_quarantined', 'task_needs_reconciliation']) {
      const alert = status.alerts.find((a) => a.kind === kind)!;
      expect(alert.message).toMatch(new RegExp(`worker ${WORKER} is unreachable since .* \\(\\d+ s\\)`));
      expect(alert.action).toMatch(new RegExp(`^Wait for ${WORKER}: if it comes back listing the task`));
    }
  });
});

describe('item 4: a worker shown offline shows since when from the first moment', () => {
  it('list_workers and the worker_offline alert carry offline_since before any sweep ran', async () => {
    const c = await enrolledCluster([]);
    f = c.f;
    const connectedAt = c.clock.now();
    c.clock.advance((c.f.deps.config.timing.worker_offline_seconds + 1) * 1000);
    const op = c.f.principal('op', ['operator']);
    const { workers } = (await c.f.invoke(op, 'list_workers', {})) as {
      workers: Array<{ worker_id: string; online: boolean; offline_since: string | null }>;
    };
    const since = new Date(connectedAt + c.f.deps.config.timing.worker_offline_seconds * 1000).toISOString();
    expect(workers.find((w) => w.worker_id === WORKER)).toMatchObject({
      online: false,
      offline_since: since,
    });
    const status = (await c.f.invoke(op, 'get_status', {})) as {
      alerts: Array<{ kind: string; message: string }>;
    };
    expect(status.alerts.find((a) => a.kind === 'worker_offline')?.message).toBe(
      `worker ${WORKER} is offline since ${since}`,
    );
    // The sweep, when it runs, records the same instant.
    c.f.deps.cluster.fleet.sweep(c.clock.now());
    expect(c.f.deps.cluster.fleet.get(WORKER).offline_since).toBe(Date.parse(since));
  });
});
