import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskSpecInput } from '../../../src/contracts/task-spec.js';
import { approveTask, clusterConfig, getTask, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';
import { removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Standing grants through a real master and a real sandboxed worker ("Must hold"): a
 * reviewer grants a scope; the agent's next five revisions inside it start without review, each with
 * its receipt; one outside waits IN_REVIEW with the failing clause; revocation stops the next run and
 * cancels the running one; max_runs is exact under ten confirms at once; a self-grant and a grant
 * widening itself are refused.
 */

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let n = 0;
const key = () => `grants-${process.pid}-${++n}`;

interface Confirmed {
  state: string;
  task_id: string | null;
  grant: { covered: boolean; grant_id: string | null; failing: { clause: string; message: string } | null };
}

/** A spec running `/bin/sh run.sh` where run.sh is an input holding `script`. */
async function scriptSpec(script: string, over: Partial<TaskSpecInput> = {}): Promise<TaskSpecInput> {
  const up = expectOk(
    await callTool<{ inputs: TaskSpecInput['inputs'] }>(alice, 'upload_inputs', {
      files: [{ path: 'run.sh', content: script }],
      idempotency_key: key(),
    }),
  );
  return validSpec({
    title: 'grant iteration',
    runtime: { kind: 'process', argv: ['/bin/sh', 'run.sh'] },
    inputs: up.inputs,
    outputs: [],
    time_limit_seconds: 60,
    ...over,
  });
}

async function proposeAndConfirm(spec: TaskSpecInput): Promise<Confirmed> {
  const created = expectOk(
    await callTool<{ proposal_id: string; revision_id: string }>(alice, 'create_proposal', {
      spec,
      idempotency_key: key(),
    }),
  );
  return expectOk(
    await callTool<Confirmed>(alice, 'confirm_revision', {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      idempotency_key: key(),
    }),
  );
}

async function grantFrom(baseRevisionId: string, over: Record<string, unknown>): Promise<string> {
  const req = expectOk(
    await callTool<{ grant: { grant_id: string } }>(alice, 'request_grant', {
      base_revision_id: baseRevisionId,
      scope: { mutable_inputs: ['run.sh'] },
      max_card_hours: 1,
      ttl_seconds: 3600,
      reason: 'iterate on run.sh',
      idempotency_key: key(),
      ...over,
    }),
  );
  const id = req.grant.grant_id;
  // alice may review others' work, never her own grant.
  expectError(
    await callTool(alice, 'decide_grant', { grant_id: id, decision: 'APPROVE', idempotency_key: key() }),
    'SELF_GRANT_FORBIDDEN',
  );
  expectOk(
    await callTool(rita, 'decide_grant', { grant_id: id, decision: 'APPROVE', idempotency_key: key() }),
  );
  return id;
}

let baseRevision = '';
let metricsToken = '';

/** Revokes alice's ACTIVE grants, so the next test's grant is the only one confirm tries. */
async function revokeAll(): Promise<void> {
  for (const g of m.store.grants.activeOf(m.store.principals.findByName('alice')!.id))
    expectOk(await callTool(rita, 'revoke_grant', { grant_id: g.id, idempotency_key: key() }));
}

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({ policy: { scripts: [{ interpreter: '/bin/sh', script_from_inputs: true }] } }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter', 'reviewer']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  metricsToken = m.createToken('ops', ['operator']);
  w = await startWorkerOn(m, 'gpu-grants', { simCards: 4 });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-grants').cards.length === 4, { what: 'four sim cards' });
  // The first run is reviewed by a person: it becomes the grant's base.
  const first = await approveTask(alice, rita, await scriptSpec('echo run 0'));
  expect((await waitUntilSettled(alice, first, 45_000)).state).toBe('COMPLETED');
  baseRevision = m.store.tasks.get(first)!.revision_id;
}, 90_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
  removeTempDirs();
});

describe('standing grants through a real worker', () => {
  it('five revisions inside the scope start without review, each with its receipt; the sixth outside waits', async () => {
    const id = await grantFrom(baseRevision, { max_runs: 6, concurrency: 2 });
    const admission: number[] = [];
    for (let i = 1; i <= 5; i++) {
      const t0 = Date.now();
      const c = await proposeAndConfirm(await scriptSpec(`echo run ${i}`));
      expect(c).toMatchObject({ state: 'APPROVED', grant: { covered: true, grant_id: id } });
      await waitFor(async () => (await getTask(alice, c.task_id!)).state !== 'QUEUED', { what: 'placed' });
      admission.push(Date.now() - t0);
      const done = await waitUntilSettled(alice, c.task_id!, 45_000);
      expect(done.state).toBe('COMPLETED');
      const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: c.task_id }));
      expect(logs.data).toBe(`run ${i}\n`);
    }
    console.log(`confirm → placed, ms: ${admission.join(', ')}`);
    const outside = await proposeAndConfirm(await scriptSpec('echo wide', { cards: { count: 2 } }));
    expect(outside).toMatchObject({ state: 'IN_REVIEW', task_id: null });
    expect(outside.grant.failing).toEqual({ clause: 'cards', message: 'cards 2 > 1' });
    const newExe = await proposeAndConfirm(validSpec({ outputs: [] }));
    expect(newExe.state).toBe('IN_REVIEW');
    expect(newExe.grant.failing?.clause).toBe('argv');

    const got = expectOk(
      await callTool<{
        grant: { budget: { runs_used: number; running: number; card_hours_reserved: number } };
        runs: Array<{
          task_id: string;
          card_seconds_charged: number | null;
          outcome: string;
          receipt: { approved_by: string; budget_after: { runs_used: number } };
          diff_against_base: Array<{ path: string }>;
        }>;
      }>(rita, 'get_grant', { grant_id: id }),
    );
    expect(got.grant.budget).toMatchObject({ runs_used: 5, running: 0, card_hours_reserved: 0 });
    expect(got.runs.map((r) => r.receipt.budget_after.runs_used)).toEqual([1, 2, 3, 4, 5]);
    for (const r of got.runs) {
      expect(r.receipt.approved_by).toBe(`grant ${id}`);
      expect(r.outcome).toBe('COMPLETED');
      expect(r.diff_against_base.map((d) => d.path)).toContain('run.sh');
      // Charged exactly from the task's start and end: 1 card × whole seconds held.
      const t = m.store.tasks.get(r.task_id)!;
      expect(r.card_seconds_charged).toBe(Math.ceil((t.finished_at! - t.started_at!) / 1000));
    }
    // Metrics: five decisions by the grant, one by a person (the base), and the grant's budget ratios.
    const text = await (
      await m.fetch(new URL('/metrics', m.url), { headers: { authorization: `Bearer ${metricsToken}` } })
    ).text();
    expect(text).toContain('gpu_broker_review_decision_seconds_count{kind="grant"} 5');
    expect(text).toContain('gpu_broker_review_decision_seconds_count{kind="person"} 1');
    expect(text).toContain(
      `gpu_broker_grant_budget_used_ratio{grant="${id}",budget="runs"} 0.8333333333333334`,
    );
  }, 180_000);

  it('revocation cancels the running task when asked and stops the next run at once', async () => {
    await revokeAll();
    const id = await grantFrom(baseRevision, { max_runs: 5 });
    const c = await proposeAndConfirm(await scriptSpec('echo started; sleep 30'));
    expect(c.state).toBe('APPROVED');
    await waitFor(async () => (await getTask(alice, c.task_id!)).state === 'RUNNING', { what: 'running' });
    const revoked = expectOk(
      await callTool<{ grant: { state: string }; cancelled_task_ids: string[] }>(rita, 'revoke_grant', {
        grant_id: id,
        cancel_running: true,
        idempotency_key: key(),
      }),
    );
    expect(revoked).toMatchObject({ grant: { state: 'REVOKED' }, cancelled_task_ids: [c.task_id] });
    expect((await waitUntilSettled(alice, c.task_id!, 45_000)).state).toBe('CANCELLED');
    const next = await proposeAndConfirm(await scriptSpec('echo after'));
    expect(next.state).toBe('IN_REVIEW');
  }, 120_000);

  it('max_runs and max_card_hours are exact under ten confirms at once; a grant never widens itself', async () => {
    await revokeAll();
    const id = await grantFrom(baseRevision, { max_runs: 3, concurrency: 10, max_card_hours: 10 });
    const specs = await Promise.all(Array.from({ length: 10 }, (_, i) => scriptSpec(`echo burst ${i}`)));
    const results = await Promise.all(specs.map(proposeAndConfirm));
    const approved = results.filter((r) => r.state === 'APPROVED');
    expect(approved).toHaveLength(3);
    expect(results.filter((r) => r.grant.failing?.clause === 'runs')).toHaveLength(7);
    for (const r of approved)
      expect((await waitUntilSettled(alice, r.task_id!, 45_000)).state).toBe('COMPLETED');

    // max_card_hours too: each run reserves 1 card × 60 s; the budget holds exactly two.
    await revokeAll();
    await grantFrom(baseRevision, { max_runs: 100, concurrency: 10, max_card_hours: 120 / 3600 });
    const hourSpecs = await Promise.all(Array.from({ length: 10 }, (_, i) => scriptSpec(`echo hours ${i}`)));
    const byHours = await Promise.all(hourSpecs.map(proposeAndConfirm));
    expect(byHours.filter((r) => r.state === 'APPROVED')).toHaveLength(2);
    expect(byHours.filter((r) => r.grant.failing?.clause === 'card_hours')).toHaveLength(8);

    const wider = expectOk(
      await callTool<{ grant: { grant_id: string; state: string } }>(alice, 'request_grant', {
        base_revision_id: baseRevision,
        scope: { mutable_inputs: ['**'], max_cards: 4 },
        max_runs: 100,
        max_card_hours: 100,
        ttl_seconds: 3600,
        reason: 'wider',
        supersedes: id,
        idempotency_key: key(),
      }),
    );
    expect(wider.grant.state).toBe('REQUESTED');
    expectError(
      await callTool(alice, 'decide_grant', {
        grant_id: wider.grant.grant_id,
        decision: 'APPROVE',
        idempotency_key: key(),
      }),
      'SELF_GRANT_FORBIDDEN',
    );
    expect((await proposeAndConfirm(await scriptSpec('echo wide', { cards: { count: 4 } }))).state).toBe(
      'IN_REVIEW',
    );
  }, 180_000);
});
