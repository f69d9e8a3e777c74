import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { ExecutionPlan } from '../../../src/contracts/worker-protocol.js';
import { PROTOCOL_VERSION } from '../../../src/contracts/worker-protocol.js';
import { heldCardsProblem } from '../../../worker/executions/card-check.js';
import { approveTask, clusterConfig, getTask, shellSpec } from '../../support/cluster.js';
import { makePlan } from '../../support/executor-plan.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { connectRawWorker } from '../../support/raw-worker.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/state-machines.md: a master restored from a backup (or otherwise rolled back) knew lower card epochs
 * than its worker had seen, granted epoch 5 on card 0 again, and a second task ran on card 0 beside the
 * first. Now (1) the worker's hello carries its per-card epoch marks and the master issues only epochs
 * above them; (2) the worker refuses an epoch equal to a mark for an execution it does not know, and
 * (3) refuses any assign on a card one of its own executions still holds, whatever the master believes.
 */

let m: TestMaster;
let alice: Client;
let rita: Client;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
});

afterAll(async () => {
  await m?.close();
});

describe('a master that knows less than its worker', () => {
  it('learns the worker’s card epochs at hello and grants only above them', async () => {
    const raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-ahead', ['worker'], 'raw-ahead'),
      workerId: 'raw-ahead',
    });
    onTestFinished(() => raw.close());
    // This master never issued an epoch here; the worker has seen 5 on card 0 and 9 on card 1.
    raw.send({
      type: 'hello',
      protocol_version: PROTOCOL_VERSION,
      worker_id: 'raw-ahead',
      boot_id: raw.bootId,
      version: 'raw-test',
      hostname: 'raw-host',
      provider: 'sim',
      cards: raw.simCards.slice(0, 2),
      executions: [],
      master_marks: [],
      card_epochs: [
        { index: 0, epoch: 5 },
        { index: 1, epoch: 9 },
      ],
      isolation: 'bwrap',
    });
    await raw.next((r) => r['type'] === 'welcome', { what: 'welcome' });
    expect(m.store.leases.epochsOf('raw-ahead', [0, 1])).toEqual([5, 9]);
    let seq = 0;
    const timer = setInterval(() => raw.sample(++seq, 2), 150);
    onTestFinished(() => clearInterval(timer));
    const from = raw.received.length;
    await approveTask(alice, rita, shellSpec('true', { worker: 'raw-ahead', cards: { count: 2 } }));
    const assign = await raw.next((r) => r['type'] === 'assign', { from, what: 'assign' });
    expect((assign['plan'] as ExecutionPlan).lease_epoch).toBe(10);
  });
});

describe('cards the worker says its executions hold', () => {
  it('are BUSY_FOREIGN to the master and never granted until the worker lets them go', async () => {
    const raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-holder', ['worker'], 'raw-holder'),
      workerId: 'raw-holder',
    });
    onTestFinished(() => raw.close());
    await raw.hello(2);
    let seq = 0;
    let held: number[] = [0];
    const send = () =>
      raw.sendSeq(++seq, {
        type: 'sample',
        sampled_at: Date.now(),
        cards: raw.simCards.slice(0, 2),
        sampler_error: null,
        held_cards: held,
      });
    send();
    const timer = setInterval(send, 150);
    onTestFinished(() => clearInterval(timer));
    await waitFor(
      () =>
        m.deps.cluster.fleet
          .listCards(m.store, Date.now(), { sample_interval_ms: 200 })
          .some((c) => c.worker_id === 'raw-holder' && c.index === 0 && c.state === 'BUSY_FOREIGN'),
      { what: 'card 0 BUSY_FOREIGN' },
    );
    const from = raw.received.length;
    const id = await approveTask(
      alice,
      rita,
      shellSpec('true', { worker: 'raw-holder', cards: { count: 2 } }),
    );
    await waitFor(async () => (await getTask(alice, id)).reason !== null, { what: 'a wait reason' });
    expect(raw.received.slice(from).some((r) => r['type'] === 'assign')).toBe(false);
    held = [];
    await raw.next((r) => r['type'] === 'assign', { from, what: 'the assign once card 0 is let go' });
  });
});

describe('the worker, whatever the master believes', () => {
  it('refuses an assign on a card one of its unfinished executions holds', () => {
    const running = makePlan({ argv: ['/bin/true'], cards: [{ index: 0, uuid: 'SIM-0' }] });
    const next = makePlan({
      argv: ['/bin/true'],
      cards: [
        { index: 0, uuid: 'SIM-0' },
        { index: 1, uuid: 'SIM-1' },
      ],
    });
    const other = makePlan({ argv: ['/bin/true'], cards: [{ index: 2, uuid: 'SIM-2' }] });
    const unfinished = [{ execution_id: running.execution_id, lease_epoch: 5, plan: running }];
    expect(heldCardsProblem(next, unfinished)).toBe(
      `card 0 is still held by execution ${running.execution_id} (lease epoch 5) on this worker`,
    );
    expect(heldCardsProblem(other, unfinished)).toBeNull();
    expect(heldCardsProblem(running, unfinished)).toBeNull();
  });
});
