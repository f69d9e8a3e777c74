import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CardSample } from '../../../src/contracts/sample.js';
import type { CardSampler } from '../../../worker/samplers/card-sampler.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { makeGateDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * ADR 0016: a cleanup receipt can sit in the worker's outbox behind messages a full master
 * refuses. The master must not fail the task CLEANUP_UNCONFIRMED for a receipt it could not take: the
 * receipt deadline (cleanup timeout plus two offline windows) counts from the last refusal while the
 * master's disk is full. Here the receipt is held back by a stalled sampler (real cards need a fresh
 * idle sample) while the (fake) disk is under `storage.min_free_bytes`; once space returns and the
 * sampler answers, the task completes normally.
 */

const GiB = 1024 * 1024 * 1024;

/** Idle "real" cards whose sampling the test can stall (as in cleanup-receipt.test.ts). */
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
    return [0].map((index) => ({
      index,
      uuid: `GPU-full-${index}`,
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

let free = 10 * GiB;
let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
const sampler = new StallableSampler();

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({
      timing: { worker_offline_seconds: 1, cleanup_timeout_seconds: 1, lease_grace_seconds: 30 },
      storage: { check_interval_ms: 3_600_000 },
    }),
    statfs: async () => ({ free_bytes: free, total_bytes: 20 * GiB }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-slow', { sampler });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-slow').cards.length === 1);
});

afterAll(async () => {
  sampler.release();
  await w?.close();
  await m?.close();
  removeTempDirs();
});

describe('a cleanup receipt while the master refuses writes for space', () => {
  it('is waited for past the usual deadline, and the task completes once space returns', async () => {
    const gate = join(makeGateDir('receipt'), 'gate');
    const id = await approveTask(alice, rita, shellSpec(`while [ ! -e '${gate}' ]; do sleep 0.05; done`));
    await waitFor(async () => (await getTask(alice, id)).state === 'RUNNING', { what: 'task running' });
    free = 100 * 1024 * 1024;
    await m.master.storage.check();
    sampler.hold();
    writeFileSync(gate, '');
    await waitFor(async () => (await getTask(alice, id)).state === 'FINALIZING', { what: 'exited' });
    // Past the receipt deadline as it would count without the refusal: exit + (1 + 2 × 1) s.
    const exitedAt = m.store.leases.executionForLease(m.store.leases.latestLeaseForTask(id)!.id)!.updated_at;
    await waitFor(() => Date.now() > exitedAt + 4_000, {
      what: 'the usual deadline passed',
      timeoutMs: 10_000,
    });
    await waitFor(() => m.store.leases.unfinished().length > 0); // one more sweep interval at least
    expect((await getTask(alice, id)).state).toBe('FINALIZING');

    free = 10 * GiB;
    await m.master.storage.check();
    sampler.release();
    expect(await waitUntilSettled(alice, id)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
  });
});
