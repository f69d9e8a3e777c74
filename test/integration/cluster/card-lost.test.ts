import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CardSample } from '../../../src/contracts/sample.js';
import { NvidiaSampler } from '../../../worker/samplers/nvidia-sampler.js';
import { parseSimMigLayout } from '../../../worker/samplers/sim-mig-layout.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import { fakeH100Cards, fakeSmiEnv, writeFakeSmiState } from '../../fixtures/fake-smi.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * A leased card that leaves its worker's samples under a running task (docs/decisions/0046-mig-slices-as-cards.md
 * §7): a MIG slice whose instance was destroyed (the sim sampler's layout changes mid-task) and a whole
 * card off the bus (the fake nvidia-smi stops listing it) take one path: the worker stops the task and
 * reports CARD_LOST naming the card; the task ends FAILED at once rather than running on to its time
 * limit. Where the cleanup receipt checks cards (a real sampler), it cannot confirm a card that is gone,
 * so the lease is QUARANTINED and the task keeps CARD_LOST.
 */

let m: TestMaster;
let alice: Client;
let rita: Client;
let ops: Client;
const workers: TestWorker[] = [];

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  ops = await m.mcpClient(m.operatorToken);
});

afterAll(async () => {
  for (const w of workers) await w.close();
  await m?.close();
  removeTempDirs();
});

/**
 * The sim sampler (still one, so the harness gives its sandbox the stand-in capability nodes) less the
 * cards whose index is in `hidden`, and with the uuids in `uuids` in place of the sampled ones (an
 * instance re-created at the same GI/CI ids).
 */
class LayoutSampler extends SimSampler {
  readonly hidden = new Set<number>();
  readonly uuids = new Map<number, string>();
  override async sample(): Promise<CardSample[]> {
    return (await super.sample())
      .filter((c) => !this.hidden.has(c.index))
      .map((c) => ({ ...c, uuid: this.uuids.get(c.index) ?? c.uuid }));
  }
}

type Alert = { kind: string; subject: string; message: string };
async function alerts(kind: string): Promise<Alert[]> {
  return expectOk(await callTool<{ alerts: Alert[] }>(ops, 'get_status', {})).alerts.filter(
    (a) => a.kind === kind,
  );
}

async function running(taskId: string) {
  await waitFor(async () => ((await getTask(alice, taskId)).state === 'RUNNING' ? true : null), {
    what: `${taskId} running`,
    timeoutMs: 30_000,
  });
  return getTask(alice, taskId);
}

describe('a leased card gone from under a running task', () => {
  it('a MIG slice destroyed mid-task: the task ends FAILED CARD_LOST at once; so does one re-created with a new uuid', async () => {
    const sampler = new LayoutSampler({
      count: 1,
      seed: 'lost-mig',
      mig: parseSimMigLayout('3g.40gb+2g.20gb+1g.10gb'),
    });
    const w = await startWorkerOn(m, 'lost-mig', { sampler });
    workers.push(w);
    const spec = (title: string) =>
      shellSpec('sleep 60', { title, worker: 'lost-mig', cards: { count: 1, mig_profile: '1g.10gb' } });
    const taskId = await approveTask(alice, rita, spec('on a slice'));
    const task = await running(taskId);
    const slice = task.cards[0]!;
    expect(slice.label).toMatch(/^0:mig:\d+\/0$/);

    sampler.hidden.add(slice.index); // the operator destroyed the instance without draining
    const done = await waitUntilSettled(alice, taskId, 30_000);
    expect(done.state).toBe('FAILED');
    expect(done.failure_reason).toBe('CARD_LOST');
    expect(done.failure_detail).toContain(`${slice.label} (${slice.uuid}) is no longer on this worker`);
    expect(done.next_action).toMatch(/^Failed: a card or MIG slice it held left its worker/);
    // Simulated cards have no cleanup card check: the lease is released, as for any simulated run.
    expect(m.store.leases.latestLeaseForTask(taskId)?.state).toBe('RELEASED');
    expect(await alerts('leased_card_missing')).toEqual([]);

    // A slice re-created at the same GI/CI with a new uuid under a running task is gone as well.
    sampler.hidden.clear();
    const second = await approveTask(alice, rita, spec('on the slice again'));
    const again = await running(second);
    sampler.uuids.set(again.cards[0]!.index, 'MIG-00000000-0000-4000-8000-00000000beef');
    const replaced = await waitUntilSettled(alice, second, 30_000);
    expect(replaced).toMatchObject({ state: 'FAILED', failure_reason: 'CARD_LOST' });
    expect(replaced.failure_detail).toContain(
      `${again.cards[0]!.label} is now MIG-00000000-0000-4000-8000-00000000beef, not ${again.cards[0]!.uuid} as leased`,
    );
    sampler.uuids.clear();

    // A hostile task that traps SIGTERM and exits 0 to pass for a success still ends CARD_LOST.
    const third = await approveTask(
      alice,
      rita,
      shellSpec("trap 'exit 0' TERM; while :; do sleep 0.1; done", {
        title: 'exits 0 on SIGTERM',
        worker: 'lost-mig',
        cards: { count: 1, mig_profile: '1g.10gb' },
      }),
    );
    const trapping = await running(third);
    sampler.hidden.add(trapping.cards[0]!.index);
    const trapped = await waitUntilSettled(alice, third, 30_000);
    expect(trapped).toMatchObject({ state: 'FAILED', failure_reason: 'CARD_LOST', exit_code: 0 });
    sampler.hidden.clear();
  });

  it('a whole card off the bus (nvidia-smi stops listing it): FAILED CARD_LOST, the lease QUARANTINED', async () => {
    const dir = makeTempDir('lost-card');
    const cards = fakeH100Cards(2);
    const statePath = await writeFakeSmiState(dir, { cards });
    const sampler = new NvidiaSampler({ env: fakeSmiEnv(statePath), timeoutMs: 3000 });
    const w = await startWorkerOn(m, 'lost-card', { sampler });
    workers.push(w);
    const taskId = await approveTask(alice, rita, shellSpec('sleep 60', { worker: 'lost-card' }));
    const task = await running(taskId);
    const held = task.cards[0]!;

    await writeFakeSmiState(dir, { cards: cards.filter((c) => c.index !== held.index) });
    const done = await waitUntilSettled(alice, taskId, 30_000);
    expect(done).toMatchObject({ state: 'FAILED', failure_reason: 'CARD_LOST' });
    // The card is named ahead of the cleanup receipt, which cannot confirm a card that is gone.
    expect(done.failure_detail).toContain(`${held.label} (${held.uuid}) is no longer on this worker`);
    expect(done.failure_detail).toContain('cleanup:');
    const lease = m.store.leases.latestLeaseForTask(taskId)!;
    expect(lease.state).toBe('QUARANTINED');
    const quarantined = await alerts('card_quarantined');
    expect(quarantined.map((a) => a.subject)).toContain(`lost-card:${held.index}`);
  });
});
