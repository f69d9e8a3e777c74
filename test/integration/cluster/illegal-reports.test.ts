import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { approveTask, clusterConfig, getTask, shellSpec } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/state-machines.md: a worker (or anyone holding a worker token) reporting `cleaned` straight after
 * `assign`, or `rejected` after `started`, used to release the lease while the task stayed ASSIGNED or
 * RUNNING for ever. Now the execution table refuses such a report (INVALID_STATE back to the worker, the
 * session kept), the task goes to RECONCILIATION_REQUIRED with its lease quarantined — never live
 * without a lease — and reconcile_task releases the cards.
 */

let m: TestMaster;
let alice: Client;
let rita: Client;
let op: Client;
let raw: RawWorker;
let seq = 0;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  op = await m.mcpClient(m.operatorToken);
  raw = await connectRawWorker({
    url: m.url,
    caPem: m.caPem,
    token: m.createToken('worker-liar', ['worker'], 'raw-liar'),
    workerId: 'raw-liar',
  });
  await raw.hello(2);
});

afterAll(async () => {
  await raw?.close();
  await m?.close();
});

/** Keeps samples fresh while a test runs (a silent worker goes offline after 2 s here). */
function keepSampling() {
  const timer = setInterval(() => raw.sample(++seq, 2), 150);
  onTestFinished(() => clearInterval(timer));
  raw.sample(++seq, 2);
}

async function assigned(): Promise<{ taskId: string; plan: Record<string, unknown> }> {
  const from = raw.received.length;
  const taskId = await approveTask(alice, rita, shellSpec('true', { worker: 'raw-liar' }));
  const assign = await raw.next((r) => r['type'] === 'assign', { from, what: 'assign' });
  return { taskId, plan: assign['plan'] as Record<string, unknown> };
}

function report(plan: Record<string, unknown>, phase: string, extra: Record<string, unknown> = {}) {
  raw.sendSeq(++seq, {
    type: 'execution',
    execution_id: plan['execution_id'],
    task_id: plan['task_id'],
    lease_epoch: plan['lease_epoch'],
    phase,
    ...extra,
  });
  return seq;
}

async function refusal(ref: number) {
  return raw.next((r) => r['type'] === 'error' && r['ref_seq'] === ref, { what: `refusal of seq ${ref}` });
}

async function expectReconcilable(taskId: string) {
  await waitFor(async () => (await getTask(alice, taskId)).state === 'RECONCILIATION_REQUIRED', {
    what: 'RECONCILIATION_REQUIRED',
  });
  const lease = m.store.leases.latestLeaseForTask(taskId)!;
  expect(lease.state).toBe('QUARANTINED');
  const status = expectOk(
    await callTool<{ alerts: Array<{ kind: string; subject: string }> }>(op, 'get_status', {}),
  );
  expect(status.alerts).toContainEqual(
    expect.objectContaining({ kind: 'task_needs_reconciliation', subject: taskId }),
  );
  expectOk(
    await callTool(op, 'reconcile_task', {
      task_id: taskId,
      resolution: 'FAILED',
      reason: 'the worker reported an impossible sequence',
      idempotency_key: `rec-${taskId}`,
    }),
  );
  expect(m.store.leases.lease(lease.id)?.state).toBe('RELEASED');
  expect((await getTask(alice, taskId)).state).toBe('FAILED');
}

describe('an execution report that is not a legal next phase', () => {
  it('`cleaned` straight after assign: refused, the task needs reconciliation, its lease is quarantined', async () => {
    keepSampling();
    const { taskId, plan } = await assigned();
    const ref = report(plan, 'cleaned');
    expect(await refusal(ref)).toMatchObject({ code: 'INVALID_STATE' });
    expect(String((await refusal(ref))['message'])).toContain('assigned; a report of cleaned cannot follow');
    expect(raw.isOpen()).toBe(true);
    await expectReconcilable(taskId);
  });

  it('accepted, started, then rejected: the same', async () => {
    keepSampling();
    const { taskId, plan } = await assigned();
    report(plan, 'accepted');
    report(plan, 'started');
    await waitFor(async () => (await getTask(alice, taskId)).state === 'RUNNING', { what: 'RUNNING' });
    const ref = report(plan, 'rejected', { failure_reason: 'SETUP_FAILED' });
    expect(await refusal(ref)).toMatchObject({ code: 'INVALID_STATE' });
    await expectReconcilable(taskId);
  });

  it('a resent earlier phase is still a harmless duplicate, and the legal path still completes', async () => {
    keepSampling();
    const { taskId, plan } = await assigned();
    report(plan, 'accepted');
    report(plan, 'started');
    report(plan, 'accepted');
    report(plan, 'exited', { exit_code: 0, signal: null, failure_reason: null, outputs: [] });
    const last = report(plan, 'cleaned');
    await raw.next((r) => r['type'] === 'ack' && r['seq'] === last, { what: 'ack of cleaned' });
    expect(raw.received.some((r) => r['type'] === 'error' && Number(r['ref_seq']) > last - 5)).toBe(false);
    await waitFor(async () => (await getTask(alice, taskId)).state === 'COMPLETED', { what: 'COMPLETED' });
  });
});
