import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import { createAccount } from '../../../src/broker/tools/accounts.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import {
  approveTask,
  clusterConfig,
  shellSpec,
  waitForAvailableCards,
  waitUntilSettled,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Accounts and the usage ledger on a real master and a real (simulated) worker: tasks of two teams run;
 * each lease is charged once, when its cards are released, to its owner's account; get_usage (MCP and
 * REST) shows a submitter their own account only and an operator every account, by account, principal
 * and model; /metrics counts card-seconds by account and model; account changes are operators' only.
 */

interface Usage {
  by: string;
  account: string | null;
  lines: Array<{ key: string; simulated: boolean; card_seconds: number; card_hours: number; leases: number }>;
  total_card_seconds: number;
}

let m: TestMaster;
let w: TestWorker;
let alice: Client; // team-a
let bob: Client; // team-b
let rita: Client;
let ops: Client;
let aliceToken: string;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  createAccount(m.deps, 'test', { name: 'team-a' });
  createAccount(m.deps, 'test', { name: 'team-b', weight: 2 });
  aliceToken = createPrincipal(
    m.deps,
    { name: 'alice', roles: ['submitter'], account: 'team-a' },
    'test',
  ).token;
  const bobToken = createPrincipal(
    m.deps,
    { name: 'bob', roles: ['submitter'], account: 'team-b' },
    'test',
  ).token;
  alice = await m.mcpClient(aliceToken);
  bob = await m.mcpClient(bobToken);
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  ops = await m.mcpClient(m.operatorToken);
  w = await startWorkerOn(m, 'gpu-usage', { sampler: new SimSampler({ count: 4, seed: 'usage' }) });
  await waitForAvailableCards(m, 4, 'four cards on gpu-usage');
});

afterAll(async () => {
  await w?.close();
  await m?.close();
});

describe('the usage ledger', () => {
  it('charges each lease once, to its owner’s account, when its cards are released', async () => {
    const a = await approveTask(alice, rita, shellSpec('sleep 1.2', { cards: { count: 2 } }));
    const b = await approveTask(bob, rita, shellSpec('true'));
    for (const [c, id] of [
      [alice, a],
      [bob, b],
    ] as const)
      expect((await waitUntilSettled(c, id)).state).toBe('COMPLETED');
    // The receipt releases the lease after the task settles: wait for both charges.
    const charged = () =>
      (m.store.db.prepare('SELECT count(*) AS n FROM usage_charges').get() as { n: number }).n;
    await waitFor(() => charged() >= 2 || null, { what: 'both leases charged', timeoutMs: 15_000 });
    const rows = m.store.db
      .prepare(
        'SELECT task_id, account, cards, card_seconds, simulated, model FROM usage_charges ORDER BY account',
      )
      .all() as Array<{
      task_id: string;
      account: string;
      cards: number;
      card_seconds: number;
      simulated: number;
      model: string;
    }>;
    expect(rows.map((r) => [r.task_id, r.account, r.cards, r.simulated])).toEqual([
      [a, 'team-a', 2, 1],
      [b, 'team-b', 1, 1],
    ]);
    // Two cards for at least the 1.2 s sleep: at least 2 × 2 whole seconds.
    expect(rows[0]!.card_seconds).toBeGreaterThanOrEqual(4);
    expect(rows[0]!.card_seconds % 2).toBe(0);
  });

  it('get_usage shows a submitter their own account, an operator every account; REST the same', async () => {
    const own = expectOk(await callTool<Usage>(alice, 'get_usage', {}));
    expect(own.account).toBe('team-a');
    expect(own.lines.map((l) => [l.key, l.simulated])).toEqual([['team-a', true]]);
    const all = expectOk(await callTool<Usage>(ops, 'get_usage', { by: 'account' }));
    expect(all.account).toBeNull();
    expect(all.lines.map((l) => l.key).sort()).toEqual(['team-a', 'team-b']);
    expect(all.total_card_seconds).toBe(all.lines.reduce((n, l) => n + l.card_seconds, 0));
    const byPrincipal = expectOk(await callTool<Usage>(ops, 'get_usage', { by: 'principal' }));
    expect(byPrincipal.lines.map((l) => l.key).sort()).toEqual(['alice', 'bob']);
    const byModel = expectOk(await callTool<Usage>(ops, 'get_usage', { by: 'model' }));
    expect(byModel.lines.every((l) => l.simulated)).toBe(true);
    const rest = await m.rest(aliceToken).get<Usage>('/api/v1/usage?by=principal');
    expect(rest.status).toBe(200);
    expect(rest.body.lines.map((l) => l.key)).toEqual(['alice']);
    // A window that ended before the tasks: nothing.
    const before = expectOk(await callTool<Usage>(ops, 'get_usage', { until: '2000-01-01T00:00:00Z' }));
    expect(before.lines).toEqual([]);
    expectError(await callTool(ops, 'get_usage', { since: 'yesterday' }), 'INVALID_INPUT');
    expectError(
      await callTool(ops, 'get_usage', { since: '2026-01-02T00:00:00Z', until: '2026-01-01T00:00:00Z' }),
      'INVALID_INPUT',
    );
  });

  it('get_status tells each caller where its account stands', async () => {
    const you = async (c: Client) =>
      expectOk(
        await callTool<{
          you: {
            principal: string;
            account: string;
            share: number;
            share_cards: number;
            card_hours_7d: number;
          };
        }>(c, 'get_status', {}),
      ).you;
    const a = await you(alice);
    // root's children: default 1, team-a 1, team-b 2.
    expect(a).toMatchObject({ principal: 'alice', account: 'team-a', share: 0.25, share_cards: 1 });
    expect(a.card_hours_7d).toBeGreaterThan(0);
    expect(await you(bob)).toMatchObject({ principal: 'bob', account: 'team-b', share: 0.5, share_cards: 2 });
  });

  it('/metrics counts card-seconds by account and model', async () => {
    const res = await m.fetch(new URL('/metrics', m.url), {
      headers: { authorization: `Bearer ${m.operatorToken}` },
    });
    const text = await res.text();
    expect(text).toContain('# TYPE gpu_broker_card_seconds_total counter');
    const line = text.split('\n').find((l) => l.startsWith('gpu_broker_card_seconds_total{account="team-a"'));
    expect(line).toMatch(/simulated="true"\} [1-9]\d*$/);
  });

  it('accounts are operators’ to change; a submitter is refused and nothing changes', async () => {
    expectError(
      await callTool(alice, 'create_account', { name: 'rogue', idempotency_key: m.key() }),
      'FORBIDDEN',
    );
    expectError(await callTool(alice, 'list_accounts', {}), 'FORBIDDEN');
    const made = expectOk(
      await callTool<{ account: { name: string; parent: string } }>(ops, 'create_account', {
        name: 'team-c',
        parent: 'team-a',
        idempotency_key: m.key(),
      }),
    );
    expect(made.account).toMatchObject({ name: 'team-c', parent: 'team-a' });
    expectError(
      await callTool(ops, 'set_account', { name: 'team-a', parent: 'team-c', idempotency_key: m.key() }),
      'INVALID_INPUT',
    );
    // team-a holds alice: not deleted; team-c is empty.
    expectError(
      await callTool(ops, 'delete_account', { name: 'team-a', idempotency_key: m.key() }),
      'INVALID_STATE',
    );
    expectOk(await callTool(ops, 'delete_account', { name: 'team-c', idempotency_key: m.key() }));
    const list = expectOk(await callTool<{ accounts: Array<{ name: string }> }>(ops, 'list_accounts', {}));
    expect(list.accounts.map((a) => a.name)).toEqual(['default', 'root', 'team-a', 'team-b']);
    // The ledger keeps history; usage is untouched by account changes.
    expect(expectOk(await callTool<Usage>(ops, 'get_usage', {})).lines.length).toBe(2);
  });

  it('a restarted master keeps the ledger as it was: nothing charged twice, nothing lost', async () => {
    const before = expectOk(await callTool<Usage>(ops, 'get_usage', { by: 'principal' }));
    await w.close();
    m = await m.restart();
    const after = await m.rest(m.operatorToken).get<Usage>('/api/v1/usage?by=principal');
    expect(after.status).toBe(200);
    expect(after.body.lines).toEqual(before.lines);
    expect(after.body.total_card_seconds).toBe(before.total_card_seconds);
  });
});
