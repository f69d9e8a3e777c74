import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCordonReason } from '../../../src/broker/tools/qualification.js';
import { BrokerError } from '../../../src/contracts/errors.js';
import type { QualificationRunView } from '../../../src/contracts/tools-qualification.js';
import type { Principal } from '../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';

/**
 * start_qualification on a Slurm pool worker (ADR 0017), on a real in-memory store through the
 * dispatcher: the ladder for the pool's nodes, the two-node rung, the whole pool reserved, and a pool
 * that is not idle refused before anything is cordoned.
 */

let f: BrokerFixture;
let op: Principal;
let launched: string[];
const WORKER = 'slurm-pool';

/** Enrols a Slurm worker whose partition has these nodes (GPU counts); `foreign` slots are held by a foreign job. */
function enrolPool(gpus: number[], foreign: number[] = [], down: number[] = []): void {
  const now = f.clock.now();
  const nodes = gpus.map((g, i) => ({ name: `n${i + 1}`, gpus: g, state: 'IDLE' }));
  const samples = nodes
    .flatMap((n) => Array.from({ length: n.gpus }, (_, i) => ({ node: n.name, i })))
    .map(({ node, i }, index) => ({
      index,
      uuid: `slurm:${node}:gpu${i}`,
      model: 'slurm gpu (simulated)',
      memory_used_mib: null,
      memory_total_mib: null,
      memory_used_pct: 0,
      utilization_pct: null,
      temperature_c: null,
      power_w: null,
      health: down.includes(index) ? ('failed' as const) : ('ok' as const),
      health_reasons: down.includes(index) ? ['node n2 is DOWN'] : [],
      processes: foreign.includes(index)
        ? [{ pid: 0, name: 'slurm job 99 someone-else', used_memory_mib: null }]
        : [],
      simulated: true,
    }));
  f.deps.store.workers.upsertOnHello(
    {
      id: WORKER,
      hostname: 'submit-host',
      provider: 'sim',
      version: '0',
      boot_id: 'b1',
      isolation: 'none',
      container_engine: null,
      backend: 'slurm',
      slurm: { partition: 'gpu', nodes },
      cards: samples.map((s) => ({
        index: s.index,
        uuid: s.uuid,
        model: s.model,
        memory_total_mib: null,
        simulated: true,
      })),
    },
    now,
  );
  f.deps.cluster.fleet.connected(WORKER, 'b1', samples, now);
}

const start = (input: Record<string, unknown> = {}) =>
  f.invoke(op, 'start_qualification', {
    worker_id: WORKER,
    idempotency_key: 'k1',
    ...input,
  }) as Promise<QualificationRunView>;

beforeEach(() => {
  // The two-node rung's ranks meet over the network (network "host"): the policy allows it here.
  f = makeBrokerDeps({ config: { policy: { allow_network: true } } });
  op = f.principal('ops', ['operator']);
  launched = [];
  f.deps.qualification = {
    assertReady: () => undefined,
    launch: (runId) => launched.push(runId),
    cancel: () => false,
  };
});

afterEach(() => f.close());

describe('start_qualification on a Slurm pool', () => {
  it('two nodes of 4: rungs 1, 2, 4 in a node, then 8 across both; the whole pool is reserved', async () => {
    enrolPool([4, 4]);
    const v = await start();
    expect(v).toMatchObject({
      state: 'RUNNING',
      requested: [1, 2, 4],
      ladder: [1, 2, 4],
      span: { cards: 8, per_node: 4 },
      skipped: [],
      reserved_cards: [0, 1, 2, 3, 4, 5, 6, 7],
    });
    expect(f.deps.store.workers.cordons().map((c) => c.reason)).toEqual(
      Array.from({ length: 8 }, () => runCordonReason(v.run_id)),
    );
    expect(f.deps.store.qualifications.get(v.run_id)?.span).toEqual({ cards: 8, per_node: 4 });
    const started = f.deps.store.audit.forSubject('qualification_run', v.run_id)[0];
    expect(started?.data).toMatchObject({ span: { cards: 8, per_node: 4 } });
    expect(launched).toEqual([v.run_id]);
  });

  it('an 8 asked for explicitly on nodes of 4 is skipped (the verdict can then be at best INCONCLUSIVE)', async () => {
    enrolPool([4, 4]);
    const v = await start({ cards: [4, 8] });
    expect(v).toMatchObject({
      requested: [4, 8],
      ladder: [4],
      span: { cards: 8, per_node: 4 },
      skipped: [{ cards: 8, reason: 'no usable node of the pool has 8 GPUs (the largest has 4)' }],
    });
  });

  it('a node that is down is not planned on: no two-node rung on a pool left with one node', async () => {
    enrolPool([4, 4], [], [4, 5, 6, 7]);
    const v = await start();
    expect(v).toMatchObject({ requested: [1, 2, 4], ladder: [1, 2, 4], span: null, skipped: [] });
  });

  it('one node of 8: the full in-node ladder and no two-node rung', async () => {
    enrolPool([8]);
    const v = await start({ cards: [1, 2] });
    expect(v).toMatchObject({
      ladder: [1, 2],
      span: null,
      skipped: [],
      reserved_cards: [0, 1, 2, 3, 4, 5, 6, 7],
    });
  });

  it('refuses a pool with a foreign job on it, before anything is cordoned', async () => {
    enrolPool([4, 4], [5]);
    const err = await start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerError);
    expect(err).toMatchObject({
      code: 'INVALID_STATE',
      details: { reason: 'POOL_NOT_IDLE', foreign_gpus: 1 },
    });
    expect((err as BrokerError).message).toBe(
      'the Slurm pool of slurm-pool is not idle: 1 GPU(s) used by other Slurm jobs (slurm job 99 someone-else)',
    );
    expect(f.deps.store.workers.cordons()).toEqual([]);
    expect(f.deps.store.qualifications.running()).toEqual([]);
    expect(launched).toEqual([]);
  });
});
