import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CARDS_TOPIC } from '../../../src/broker/topics.js';
import { HySampler } from '../../../worker/samplers/hy-sampler.js';
import { fakeHyCards, fakeSmiEnv, writeFakeSmiState } from '../../fixtures/fake-smi.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * A worker whose `hy-smi` (the fake, printing the real format from a state file) fails: once, then for
 * good. A failing sampler is reported as `sampler_error`, never as silence; its cards become UNKNOWN
 * and are not scheduled until a sample succeeds again.
 */

interface Cards {
  cards: Array<{ worker_id: string; index: number; state: string; reasons: string[]; simulated: boolean }>;
}

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let op: Client;
let stateDir: string;
/** Every (sampler_error, card states) the master published, in order. */
const seen: Array<{ error: string | null; states: string[] }> = [];
let unsubscribe: () => void = () => {};

function cardStates(): string[] {
  return m.deps.cluster.fleet
    .listCards(m.store, Date.now(), { sample_interval_ms: m.config.timing.sample_interval_ms })
    .filter((c) => c.worker_id === 'hy-1')
    .map((c) => c.state);
}

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  op = await m.mcpClient(m.operatorToken);
  stateDir = makeTempDir('hy');
  const statePath = await writeFakeSmiState(stateDir, { cards: fakeHyCards(2) });
  unsubscribe = m.deps.notifier.onAny((topic) => {
    if (topic === CARDS_TOPIC)
      seen.push({ error: m.deps.cluster.fleet.get('hy-1').sampler_error, states: cardStates() });
  });
  const sampler = new HySampler({ env: fakeSmiEnv(statePath), hostname: 'hy-host', timeoutMs: 3000 });
  w = await startWorkerOn(m, 'hy-1', { sampler });
  await waitFor(() => cardStates().join() === 'AVAILABLE,AVAILABLE', { what: 'two available hy cards' });
});

afterAll(async () => {
  unsubscribe();
  await w?.close();
  await m?.close();
  removeTempDirs();
});

describe('hy-smi failures', () => {
  it('failing once: sampler_error, cards UNKNOWN, then back to AVAILABLE', async () => {
    const from = seen.length;
    await writeFakeSmiState(stateDir, {
      cards: fakeHyCards(2),
      faults: [{ tool: 'hy-smi', when: 'table', action: 'fail', times: 1, stderr: 'hy-smi: driver busy' }],
    });
    await waitFor(() => seen.slice(from).some((s) => s.error !== null), { what: 'a sampler_error' });
    await waitFor(
      () =>
        m.deps.cluster.fleet.get('hy-1').sampler_error === null &&
        cardStates().join() === 'AVAILABLE,AVAILABLE',
      {
        what: 'recovery',
      },
    );
    const during = seen.slice(from).find((s) => s.error !== null)!;
    expect(during.error).toContain('driver busy');
    expect(during.states).toEqual(['UNKNOWN', 'UNKNOWN']);
    expect(seen.at(-1)).toEqual({ error: null, states: ['AVAILABLE', 'AVAILABLE'] });
  });

  it('failing for good: cards UNKNOWN and not scheduled, shown in list_cards and get_status', async () => {
    await writeFakeSmiState(stateDir, {
      cards: fakeHyCards(2),
      faults: [{ tool: 'hy-smi', when: 'table', action: 'fail', stderr: 'hy-smi: no devices found' }],
    });
    await waitFor(() => cardStates().join() === 'UNKNOWN,UNKNOWN', { what: 'unknown cards' });
    const listed = expectOk(await callTool<Cards>(op, 'list_cards', {}));
    expect(listed.cards.map((c) => [c.index, c.state, c.simulated])).toEqual([
      [0, 'UNKNOWN', false],
      [1, 'UNKNOWN', false],
    ]);
    expect(listed.cards[0]!.reasons[0]).toMatch(/^sampler failing: .*no devices found/);
    const status = expectOk(
      await callTool<{ alerts: Array<{ kind: string; subject: string; message: string }> }>(
        op,
        'get_status',
        {},
      ),
    );
    expect(status.alerts).toContainEqual(
      expect.objectContaining({
        kind: 'sampler_error',
        subject: 'hy-1',
        message: expect.stringContaining('no devices found'),
      }),
    );

    const taskId = await approveTask(alice, rita, shellSpec('echo "HIP=$HIP_VISIBLE_DEVICES"'));
    const queued = await waitFor(async () => {
      const t = await getTask(alice, taskId);
      return t.reason !== null ? t : null;
    });
    expect(queued).toMatchObject({ state: 'QUEUED', position: 1 });
    expect(queued.reason).toMatchObject({ code: 'waiting_for_cards', need: 1, eligible: 0, free: 0 });
    // Several more failed samples arrive (and scheduling passes run); the task stays queued.
    const mark = m.store.workers.mark('hy-1', w.worker.bootId);
    await waitFor(() => m.store.workers.mark('hy-1', w.worker.bootId) >= mark + 3, {
      what: 'three more samples',
    });
    expect((await getTask(alice, taskId)).state).toBe('QUEUED');
    expect(m.store.leases.latestLeaseForTask(taskId)).toBeUndefined();

    // The tool works again: the cards come back and the task runs on a real (fake-smi) card.
    await writeFakeSmiState(stateDir, { cards: fakeHyCards(2) });
    const done = await waitUntilSettled(alice, taskId);
    expect(done).toMatchObject({ state: 'COMPLETED', simulated: false, worker_id: 'hy-1' });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    expect(logs.data).toBe('HIP=0\n');
  });
});
