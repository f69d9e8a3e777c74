import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TaskRetention } from '../../../src/broker/loops/task-retention.js';
import type { Clock } from '../../../src/platform/clock.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * ADR 0016: retention of what FINAL tasks produced. Real tasks run on a real worker; the master's
 * clock (injected: the wall clock plus a shift the test moves) then jumps ahead. The sweep deletes the
 * logs of tasks that ended more than `task_logs_days` ago and the bytes of their outputs after
 * `outputs_days`, in batches that yield; the task rows, the output listing and the audit chain stay;
 * `get_task_logs` / `get_task_outputs` say the data was pruned (a typed field), not an empty success.
 */

const DAY = 86_400_000;
let shift = 0;
const clock: Clock = { now: () => Date.now() + shift };

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;

interface Logs {
  data: string;
  total_bytes: number;
  logs_pruned_at: string | null;
}
interface Outputs {
  outputs: Array<{ path: string; size: number; sha256: string }>;
  outputs_pruned_at: string | null;
  file: { content: string } | null;
}

beforeAll(async () => {
  m = await startTestMaster({
    clock,
    config: clusterConfig({
      storage: { retention: { task_logs_days: 30, outputs_days: 90, batch_size: 1, interval_seconds: 3600 } },
    }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-keep', { simCards: 1 });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-keep').cards.length === 1, { what: 'one card' });
});

afterAll(async () => {
  await w?.close();
  await m?.close();
});

async function runTask(name: string): Promise<string> {
  const id = await approveTask(
    alice,
    rita,
    shellSpec(`echo "log of ${name}"; echo "${name}" > "$GPU_BROKER_OUTPUT_DIR/result.txt"`, {
      title: name,
      outputs: [{ path: 'result.txt', required: true }],
    }),
  );
  expect(await waitUntilSettled(alice, id)).toMatchObject({ state: 'COMPLETED' });
  return id;
}

const logs = async (id: string) => expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: id }));
const outputs = async (id: string, path?: string) =>
  callTool<Outputs>(alice, 'get_task_outputs', { task_id: id, ...(path ? { path } : {}) });

/** Moves the master's clock and waits until the worker's cards are fresh again on it. */
async function jump(days: number) {
  shift += days * DAY;
  await waitFor(() => m.deps.cluster.fleet.isOnline('gpu-keep', clock.now()), { what: 'worker fresh again' });
}

describe('task retention', () => {
  let old: string;
  let recent: string;

  it('prunes the logs of tasks that ended more than task_logs_days ago, keeping the task and its outputs', async () => {
    old = await runTask('old');
    await jump(20);
    recent = await runTask('recent');
    await jump(11); // old ended 31 days ago, recent 11
    expect(await m.master.retention.run()).toEqual({ logs_tasks: 1, outputs_tasks: 0 });

    const oldLogs = await logs(old);
    expect(oldLogs).toMatchObject({ data: '', total_bytes: 0 });
    expect(oldLogs.logs_pruned_at).toBe(new Date(oldLogs.logs_pruned_at!).toISOString());
    expect(await logs(recent)).toMatchObject({ data: 'log of recent\n', logs_pruned_at: null });
    // The task row and the outputs stay.
    expect((await getTask(alice, old)).state).toBe('COMPLETED');
    const out = expectOk(await outputs(old, 'result.txt'));
    expect(out).toMatchObject({ outputs_pruned_at: null, file: { content: 'old\n' } });
    // A second sweep finds nothing more to do.
    expect(await m.master.retention.run()).toEqual({ logs_tasks: 0, outputs_tasks: 0 });
  });

  it('prunes output bytes after outputs_days: the listing stays, reading a file says why it is gone', async () => {
    await jump(60); // old ended 91 days ago, recent 71
    expect(await m.master.retention.run()).toEqual({ logs_tasks: 1, outputs_tasks: 1 });
    const listed = expectOk(await outputs(old));
    expect(listed.outputs).toEqual([
      { path: 'result.txt', size: 4, sha256: expect.stringMatching(/^[0-9a-f]{64}$/) },
    ]);
    expect(listed.outputs_pruned_at).not.toBeNull();
    const gone = expectError(await outputs(old, 'result.txt'), 'NOT_FOUND');
    expect(gone.details).toMatchObject({ reason: 'pruned_by_retention' });
    expect(expectOk(await outputs(recent, 'result.txt')).file).toMatchObject({ content: 'recent\n' });
    expect((await logs(recent)).logs_pruned_at).not.toBeNull();
    // The audit chain is untouched by retention.
    expect(await m.master.audit.verifyAll()).toMatchObject({ ok: true });
  });

  it('works in batches that yield, and 0 days keeps for ever', async () => {
    for (const name of ['b1', 'b2', 'b3']) await runTask(name);
    await jump(31);
    const keepForever = new TaskRetention(m.store, clock, {
      task_logs_days: 0,
      outputs_days: 0,
      batch_size: 1,
    });
    expect(await keepForever.run()).toEqual({ logs_tasks: 0, outputs_tasks: 0 });
    let yields = 0;
    const batched = new TaskRetention(m.store, clock, {
      task_logs_days: 30,
      outputs_days: 0,
      batch_size: 1,
      yieldToLoop: async () => {
        yields++;
        await new Promise((resolve) => setImmediate(resolve));
      },
    });
    expect(await batched.run()).toEqual({ logs_tasks: 3, outputs_tasks: 0 });
    expect(yields).toBe(3);
  });
});
