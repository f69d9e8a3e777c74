import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CardSample } from '../../../src/contracts/sample.js';
import type { CardSampler } from '../../../worker/samplers/card-sampler.js';
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
import { makeGateDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * A cleanup receipt that comes late. On real cards the receipt needs a fresh sample showing the cards
 * idle; when sampling stalls, the master stops waiting (cleanup timeout plus two offline windows),
 * quarantines the lease and fails the task CLEANUP_UNCONFIRMED. The receipt that arrives afterwards
 * must still release the cards (docs/state-machines.md: QUARANTINED → RELEASED by a later cleanup receipt).
 */

/** Idle "real" cards whose sampling the test can stall: every sample() waits while held. */
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
      uuid: `GPU-stall-${index}`,
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

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let watch: LeaseWatch;
const sampler = new StallableSampler();

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({
      timing: { worker_offline_seconds: 1, cleanup_timeout_seconds: 1, lease_grace_seconds: 5 },
    }),
  });
  watch = watchLeaseCards(m.store, m.deps.notifier);
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-stall', { sampler });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-stall').cards.length === 2);
});

afterAll(async () => {
  sampler.release();
  watch?.stop();
  await w?.close();
  await m?.close();
  removeTempDirs();
});

describe('a late cleanup receipt', () => {
  it('releases the quarantined lease of a task the master already failed CLEANUP_UNCONFIRMED', async () => {
    const gate = join(makeGateDir('stall'), 'gate');
    const id = await approveTask(
      alice,
      rita,
      shellSpec(`while [ ! -e '${gate}' ]; do sleep 0.05; done; echo done`),
    );
    await waitFor(async () => (await getTask(alice, id)).state === 'RUNNING', { what: 'task running' });
    sampler.hold();
    writeFileSync(gate, '');
    const failed = await waitUntilSettled(alice, id);
    expect(failed).toMatchObject({ state: 'FAILED', failure_reason: 'CLEANUP_UNCONFIRMED', exit_code: 0 });
    const lease = m.store.leases.latestLeaseForTask(id)!;
    expect(lease.state).toBe('QUARANTINED');
    // The worker stayed online all along: only its receipt was slow.
    expect(m.deps.cluster.fleet.isOnline('gpu-stall', Date.now())).toBe(true);

    sampler.release();
    await waitFor(() => m.store.leases.lease(lease.id)?.state === 'RELEASED', {
      what: 'the late receipt releasing the lease',
    });
    const released = m.store.audit.forSubject('lease', lease.id).at(-1)!;
    expect(released).toMatchObject({ action: 'lease.cleaned', actor: 'worker' });
    expect(m.store.leases.executionForLease(lease.id)?.phase).toBe('cleaned');
    expect((await getTask(alice, id)).state).toBe('FAILED');
    const status = expectOk(await callTool<{ alerts: Array<{ kind: string }> }>(alice, 'get_status', {}));
    expect(status.alerts.map((a) => a.kind)).not.toContain('card_quarantined');
    expect(watch.violations).toEqual([]);
  });
});
