import { afterEach, describe, expect, it } from 'vitest';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { acceptHello, recordSample, storeHello } from '../../../../src/broker/workers/session.js';
import {
  HELLO_MAX_EXECUTIONS,
  PROTOCOL_VERSION,
  type WorkerMessage,
} from '../../../../src/contracts/worker-protocol.js';
import type { BrokerFixture } from '../../../support/deps.js';
import { enrolledCluster, samples, WORKER } from '../../../support/enrolled-cluster.js';

/**
 * The worker-session use cases the hub calls (src/broker/workers/session.ts) on a real in-memory store:
 * what a hello reconciles (src/domain/machines/worker-reconcile.ts applied), what it learns, what it returns.
 */

type Hello = Extract<WorkerMessage, { type: 'hello' }>;

let f: BrokerFixture | undefined;
afterEach(() => f?.close());

function hello(over: Partial<Hello> = {}): Hello {
  return {
    type: 'hello',
    protocol_version: PROTOCOL_VERSION,
    worker_id: WORKER,
    boot_id: 'boot-1',
    version: '0',
    hostname: 'host',
    provider: 'sim',
    cards: samples,
    executions: [],
    master_marks: [],
    card_epochs: [],
    isolation: 'bwrap',
    container_engine: null,
    mounts: [],
    backend: 'local',
    slurm: null,
    seccomp: null,
    host: null,
    ...over,
  };
}

/** One approved task granted by a scheduler pass; returns its execution. */
async function granted() {
  const c = await enrolledCluster([1]);
  f = c.f;
  new Scheduler(c.f.deps, c.f.deps.cluster.fleet, c.f.deps.cluster.link).runPass();
  const [e] = c.f.deps.store.leases.unfinishedForWorker(WORKER);
  if (!e) throw new Error('no grant');
  return { ...c, e };
}

const taskState = (fx: BrokerFixture, id: string) => fx.deps.store.tasks.get(id)?.state;
const leaseState = (fx: BrokerFixture, id: string) => fx.deps.store.leases.lease(id)?.state;

describe('acceptHello', () => {
  it('leaves alone an execution whose assign is still in the outbox', async () => {
    const { f: fx, clock, e } = await granted();
    acceptHello(fx.deps, WORKER, hello(), clock.now());
    expect(taskState(fx, e.task_id)).toBe('ASSIGNED');
    expect(leaseState(fx, e.lease_id)).toBe('ACTIVE');
  });

  it('marks lost what a complete hello does not list once the worker had the assign', async () => {
    const { f: fx, clock, e } = await granted();
    const [assign] = fx.deps.store.outbox.unacked(WORKER);
    const { welcome } = acceptHello(
      fx.deps,
      WORKER,
      hello({ master_marks: [{ boot_id: assign!.boot_id, seq: assign!.seq }] }),
      clock.now(),
    );
    expect(taskState(fx, e.task_id)).toBe('RECONCILIATION_REQUIRED');
    expect(leaseState(fx, e.lease_id)).toBe('QUARANTINED');
    expect(fx.deps.store.outbox.unacked(WORKER)).toEqual([]);
    expect(welcome).toMatchObject({ type: 'welcome', worker_id: WORKER, protocol_version: PROTOCOL_VERSION });
  });

  it('asks with a typed query instead when the list was cut at HELLO_MAX_EXECUTIONS', async () => {
    const { f: fx, clock, e } = await granted();
    const [assign] = fx.deps.store.outbox.unacked(WORKER);
    const others = Array.from({ length: HELLO_MAX_EXECUTIONS }, (_, i) => ({
      execution_id: `ex_old_${i}`,
      task_id: `task_old_${i}`,
      lease_epoch: 1,
      phase: 'cleaned' as const,
      cards: [],
    }));
    acceptHello(
      fx.deps,
      WORKER,
      hello({ executions: others, master_marks: [{ boot_id: assign!.boot_id, seq: assign!.seq }] }),
      clock.now(),
    );
    expect(taskState(fx, e.task_id)).toBe('ASSIGNED');
    expect(fx.deps.store.outbox.unacked(WORKER).map((o) => o.body)).toEqual([
      expect.objectContaining({ type: 'query', execution_id: e.id, protocol_version: PROTOCOL_VERSION }),
    ]);
  });

  it('learns the epochs the worker saw and holds the cards its executions hold', async () => {
    const c = await enrolledCluster([1]);
    f = c.f;
    acceptHello(
      c.f.deps,
      WORKER,
      hello({
        card_epochs: [{ index: 0, epoch: 41 }],
        executions: [
          { execution_id: 'ex_unknown_here', task_id: 't', lease_epoch: 41, phase: 'started', cards: [0] },
        ],
      }),
      c.clock.now(),
    );
    expect(c.f.deps.cluster.fleet.get(WORKER).held_cards).toEqual([0]);
    new Scheduler(c.f.deps, c.f.deps.cluster.fleet, c.f.deps.cluster.link).runPass();
    const [e] = c.f.deps.store.leases.unfinishedForWorker(WORKER);
    const lease = c.f.deps.store.leases.lease(e!.lease_id)!;
    // Not card 0 (held), and above every epoch the worker reported.
    expect(lease.cards.map((x) => x.index)).not.toContain(0);
    expect(lease.lease_epoch).toBeGreaterThanOrEqual(1);

    // Once the worker no longer holds card 0, a lease there is numbered above 41.
    c.f.deps.store.transaction(() =>
      recordSample(
        c.f.deps,
        WORKER,
        {
          type: 'sample',
          protocol_version: PROTOCOL_VERSION,
          boot_id: 'boot-1',
          seq: 1,
          sampled_at: c.clock.now(),
          cards: samples,
          sampler_error: null,
          held_cards: [],
        },
        c.clock.now(),
      ),
    );
    expect(c.f.deps.cluster.fleet.get(WORKER).held_cards).toEqual([]);
    expect(c.f.deps.store.leases.epochsOf(WORKER, [0])).toEqual([41]);
  });

  it('welcomes a hello the store cannot take (stored: false), holds its cards, and stores it later', async () => {
    const c = await enrolledCluster([]);
    f = c.f;
    const workers = c.f.deps.store.workers;
    const original = workers.upsertOnHello;
    workers.upsertOnHello = () => {
      throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    };
    const msg = hello({
      boot_id: 'boot-full',
      card_epochs: [{ index: 0, epoch: 41 }],
      executions: [
        { execution_id: 'ex_unknown_here', task_id: 't', lease_epoch: 41, phase: 'started', cards: [0] },
      ],
    });
    const { welcome, stored } = acceptHello(c.f.deps, WORKER, msg, c.clock.now());
    expect(stored).toBe(false);
    expect(welcome).toMatchObject({ type: 'welcome', worker_id: WORKER });
    // Nothing written (one transaction), yet the fleet knows the session and the held card.
    expect(workers.get(WORKER)?.boot_id).not.toBe('boot-full');
    expect(c.f.deps.store.leases.epochsOf(WORKER, [0])).not.toEqual([41]);
    expect(c.f.deps.cluster.fleet.get(WORKER).held_cards).toEqual([0]);

    workers.upsertOnHello = original;
    expect(storeHello(c.f.deps, WORKER, msg, c.clock.now())).toEqual([0]);
    expect(workers.get(WORKER)?.boot_id).toBe('boot-full');
    expect(c.f.deps.store.leases.epochsOf(WORKER, [0])).toEqual([41]);
  });

  it('refuses a card list naming one index twice, and keeps the cards it knew', async () => {
    const c = await enrolledCluster([]);
    f = c.f;
    acceptHello(c.f.deps, WORKER, hello({ cards: [samples[0]!, samples[0]!] }), c.clock.now());
    expect(c.f.deps.store.workers.get(WORKER)?.cards).toHaveLength(samples.length);
    expect(c.f.deps.cluster.fleet.get(WORKER).sampler_error).not.toBeNull();
  });
});
