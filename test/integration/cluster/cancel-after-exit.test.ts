import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskView } from '../../../src/contracts/views.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/operations.md "Audit retention", seen in the soak: a task exits 0 on a frozen worker, is cancelled before the worker reports
 * the exit, and the worker's executor then labels the exit CANCELLED (its kill raced the reaped exit).
 * The cancel never took effect, so the task ends COMPLETED with exit code 0, as cancel_task documents.
 * A raw WSS worker plays the frozen worker's reports in that order.
 */

let m: TestMaster;
let alice: Client;
let rita: Client;
let raw: RawWorker;
let seq = 0;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  raw = await connectRawWorker({
    url: m.url,
    caPem: m.caPem,
    token: m.createToken('worker-raw', ['worker'], 'raw-c'),
    workerId: 'raw-c',
  });
  await raw.hello(1);
});

afterAll(async () => {
  await raw?.close();
  await m?.close();
  removeTempDirs();
});

describe('cancel after the process already exited 0', () => {
  it('ends COMPLETED with exit code 0, not CANCELLED', async () => {
    const pump = setInterval(() => raw.sample(++seq, 1), 100);
    try {
      const taskId = await approveTask(alice, rita, shellSpec('true', { worker: 'raw-c' }));
      const assign = await raw.next((r) => r['type'] === 'assign', { what: 'assign' });
      raw.send({ type: 'ack', boot_id: assign['boot_id'], seq: assign['seq'] });
      const plan = assign['plan'] as { execution_id: string; lease_epoch: number };
      const report = (phase: string, extra: Record<string, unknown> = {}) => ({
        type: 'execution',
        execution_id: plan.execution_id,
        task_id: taskId,
        lease_epoch: plan.lease_epoch,
        phase,
        ...extra,
      });
      raw.sendSeq(++seq, report('accepted'));
      raw.sendSeq(++seq, report('started'));
      await waitFor(async () => (await getTask(alice, taskId)).state === 'RUNNING', { what: 'RUNNING' });

      const cancelled = expectOk(
        await callTool<{ task: TaskView }>(alice, 'cancel_task', {
          task_id: taskId,
          idempotency_key: m.key(),
        }),
      );
      expect(cancelled.task).toMatchObject({ state: 'RUNNING', desired: 'cancel' });
      await raw.next((r) => r['type'] === 'cancel', { what: 'cancel' });
      // The thawed worker: exit 0, but labelled CANCELLED because the cancel arrived before the exit was reaped.
      raw.sendSeq(
        ++seq,
        report('exited', { exit_code: 0, signal: null, failure_reason: 'CANCELLED', outputs: [] }),
      );
      raw.sendSeq(++seq, report('cleaned', { exit_code: 0, outputs: [] }));
      const done = await waitUntilSettled(alice, taskId);
      expect(done).toMatchObject({
        state: 'COMPLETED',
        exit_code: 0,
        failure_reason: null,
        desired: 'cancel',
      });
      expect(m.store.leases.latestLeaseForTask(taskId)?.state).toBe('RELEASED');
    } finally {
      clearInterval(pump);
    }
  });
});
