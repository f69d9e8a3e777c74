import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import { createAccount, setAccount } from '../../../src/broker/tools/accounts.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import {
  approveTask,
  clusterConfig,
  getTask,
  shellSpec,
  waitForAvailableCards,
  waitForTask,
  waitUntilSettled,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Quotas per account and card model on a real master and two real (simulated) workers, one of "H100"
 * cards and one of "A100" cards (ADR 0048): team-a may hold one H100. Its second H100-only task waits
 * with a reason naming the H100 quota, what it holds and what frees it, while a free H100 sits idle; a
 * task of it that may take any card starts on the A100 instead; once its H100 task ends, the waiting one
 * starts. get_status shows team-a where it stands per model.
 */

/** Simulated cards reported as `model` (still a SimSampler: the sandbox fakes sim devices for it). */
class ModelledSim extends SimSampler {
  constructor(
    private readonly model: string,
    seed: string,
    count: number,
  ) {
    super({ count, seed });
  }

  override async sample() {
    return (await super.sample()).map((c) => ({ ...c, model: this.model }));
  }
}

type TaskView = Awaited<ReturnType<typeof getTask>>;

let m: TestMaster;
let h100: TestWorker;
let a100: TestWorker;
let alice: Client; // team-a
let rita: Client;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  createAccount(m.deps, 'test', { name: 'team-a' });
  setAccount(m.deps, 'test', { name: 'team-a', model: 'H100', nominal_cards: 1, borrowing_limit: 0 });
  alice = await m.mcpClient(
    createPrincipal(m.deps, { name: 'alice', roles: ['submitter'], account: 'team-a' }, 'test').token,
  );
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  h100 = await startWorkerOn(m, 'gpu-h100', { sampler: new ModelledSim('SIM H100 80GB', 'h100', 2) });
  a100 = await startWorkerOn(m, 'gpu-a100', { sampler: new ModelledSim('SIM A100-SXM4', 'a100', 1) });
  await waitForAvailableCards(m, 3, 'two H100s and one A100');
});

afterAll(async () => {
  await h100?.close();
  await a100?.close();
  await m?.close();
});

const waitFor_ = (id: string, ok: (t: TaskView) => boolean, what: string) =>
  waitForTask(alice, id, ok, what, 20_000);

describe('quotas per card model', () => {
  it('an H100 task over the quota waits naming it; an any-card task starts on the A100; the H100 task starts once one ends', async () => {
    // Holds team-a's one H100 until it is cancelled.
    const first = await approveTask(
      alice,
      rita,
      shellSpec('sleep 50', { cards: { count: 1, model: 'H100' } }),
    );
    await waitFor_(first, (t) => t.state === 'RUNNING', 'the first H100 task running');
    const second = await approveTask(alice, rita, shellSpec('true', { cards: { count: 1, model: 'H100' } }));
    const waiting = await waitFor_(second, (t) => t.reason !== null, 'a wait reason');
    expect(waiting.state).toBe('QUEUED');
    expect(waiting.reason).toMatchObject({
      code: 'account_quota_exceeded',
      account: 'team-a',
      model: 'H100',
      held: 1,
      nominal: 1,
      borrowing_limit: 0,
    });
    expect(String(waiting.reason?.['message'])).toContain(
      'team-a holds 1 of its 1 nominal + 0 borrowing H100 cards',
    );
    expect(String(waiting.reason?.['message'])).toContain('Frees when one of its H100 tasks ends');

    // Any card will do: the A100, though an H100 is free.
    const any = await approveTask(alice, rita, shellSpec('true'));
    const ran = await waitUntilSettled(alice, any);
    expect(ran.state).toBe('COMPLETED');
    expect(ran.worker_id).toBe('gpu-a100');
    expect((await getTask(alice, second)).state).toBe('QUEUED');

    // get_status: team-a's H100 quota, held and what it may hold.
    const status = expectOk(
      await callTool<{ you: { model_quotas: Array<Record<string, unknown>>; words: string } }>(
        alice,
        'get_status',
        {},
      ),
    );
    expect(status.you.words).toContain("team-a's H100 cards: holds 1 of its 1 nominal (may hold 1)");
    expect(status.you.model_quotas).toEqual([
      expect.objectContaining({ model: 'H100', held_cards: 1, nominal_cards: 1, limit_cards: 1 }),
    ]);

    // The H100 task ends: the waiting one starts on the H100 it may now hold.
    expectOk(await callTool(alice, 'cancel_task', { task_id: first, idempotency_key: 'cancel-first' }));
    expect((await waitUntilSettled(alice, first)).state).toBe('CANCELLED');
    const done = await waitUntilSettled(alice, second);
    expect(done.state).toBe('COMPLETED');
    expect(done.worker_id).toBe('gpu-h100');
  });
});
