import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approveTask, clusterConfig, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * ADR 0016 (first part): a task printing far more than the master keeps. Its log stops at the
 * per-task cap (both streams together) with one marker line, `get_task_logs` says `log_capped`, and the
 * task itself is unaffected: it completes with its exit code.
 */

interface Logs {
  data: string;
  total_bytes: number;
  log_capped: boolean;
}

const CAP = 8192;
let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig({ storage: { max_log_bytes_per_task: CAP } }) });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-loud', { simCards: 1 });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-loud').cards.length === 1, { what: 'one card' });
});

afterAll(async () => {
  await w?.close();
  await m?.close();
});

describe('the per-task log cap', () => {
  it('keeps at most the cap, marks the cut once, flags it, and lets the task complete', async () => {
    const id = await approveTask(
      alice,
      rita,
      shellSpec(
        'i=0; while [ $i -lt 4000 ]; do echo "line $i of a loud task"; echo "err $i" >&2; i=$((i+1)); done',
      ),
    );
    const task = await waitUntilSettled(alice, id);
    expect(task).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const read = async (stream: 'stdout' | 'stderr') =>
      expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: id, stream, max_bytes: 65536 }));
    const [out, err] = [await read('stdout'), await read('stderr')];
    expect(out.log_capped).toBe(true);
    expect(err.log_capped).toBe(true);
    const marker = /\[gpu-broker: this task's log reached its cap of 8192 bytes; the rest was dropped\]/g;
    const markers = (out.data.match(marker) ?? []).length + (err.data.match(marker) ?? []).length;
    expect(markers).toBe(1);
    const kept = out.total_bytes + err.total_bytes;
    expect(kept).toBeGreaterThan(CAP);
    expect(kept).toBeLessThan(CAP + 200);
    expect(out.data.startsWith('line 0 of a loud task\n')).toBe(true);
  });

  it('leaves a quiet task alone', async () => {
    const id = await approveTask(alice, rita, shellSpec('echo quiet'));
    await waitUntilSettled(alice, id);
    const logs = expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: id }));
    expect(logs).toMatchObject({ data: 'quiet\n', log_capped: false });
  });
});
