import { createHash } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import {
  approveTask,
  clusterConfig,
  type LeaseWatch,
  shellSpec,
  waitForAvailableCards,
  waitUntilSettled,
  watchLeaseCards,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * The whole path on a real master and a real worker over WSS: an approved 2-card task runs with exactly
 * its leased cards visible, its logs and outputs come back through the MCP tools, and its lease is
 * released by the worker's cleanup receipt, not before.
 */

interface Logs {
  offset: number;
  next_offset: number;
  total_bytes: number;
  data: string;
  complete: boolean;
}
interface Outputs {
  outputs: Array<{ path: string; size: number; sha256: string }>;
  file: { path: string; encoding: string; content: string; truncated: boolean } | null;
}

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let watch: LeaseWatch;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  watch = watchLeaseCards(m.store, m.deps.notifier);
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  const sampler = new SimSampler({ count: 4, seed: 'e2e' });
  // Card 0 runs someone else's process: the lease must skip it, so "0,1" cannot pass by accident.
  sampler.setOverride(0, {
    memory_used_mib: 40000,
    processes: [{ pid: 4242, name: 'python', used_memory_mib: 40000 }],
  });
  w = await startWorkerOn(m, 'gpu-e2e', { sampler });
  await waitForAvailableCards(m, 3, 'three available cards on gpu-e2e');
});

afterAll(async () => {
  watch?.stop();
  await w?.close();
  await m?.close();
});

const SCRIPT = [
  'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"',
  'echo "HIP_VISIBLE_DEVICES=$HIP_VISIBLE_DEVICES"',
  'echo "LEASE_EPOCH=$GPU_BROKER_LEASE_EPOCH"',
  'echo "GPU_IDS=$GPU_BROKER_GPU_IDS"',
  'echo "NODES=$(cd /dev && echo nvidia*)"',
  'i=1; while [ $i -le 200 ]; do echo "line $i of the log"; i=$((i+1)); done',
  'echo "a warning on stderr" >&2',
  'printf \'{"ok":true,"cards":"%s"}\' "$CUDA_VISIBLE_DEVICES" > "$GPU_BROKER_OUTPUT_DIR/result.json"',
  'mkdir -p "$GPU_BROKER_OUTPUT_DIR/metrics" && echo "step,loss" > "$GPU_BROKER_OUTPUT_DIR/metrics/loss.csv"',
].join('\n');

describe('an approved 2-card task, end to end', () => {
  let taskId: string;

  it('completes with its exit code, on exactly the two leased cards', async () => {
    taskId = await approveTask(
      alice,
      rita,
      shellSpec(SCRIPT, {
        cards: { count: 2 },
        outputs: [
          { path: 'result.json', required: true },
          { path: 'metrics/loss.csv', required: false },
        ],
      }),
    );
    const task = await waitUntilSettled(alice, taskId);
    expect(task).toMatchObject({
      state: 'COMPLETED',
      exit_code: 0,
      failure_reason: null,
      signal: null,
      worker_id: 'gpu-e2e',
      simulated: true,
    });
    expect(task.cards.map((c) => c.index)).toEqual([1, 2]);

    const lease = m.store.leases.latestLeaseForTask(taskId)!;
    expect(lease.cards.map((c) => c.index)).toEqual([1, 2]);
    expect(task.lease_epoch).toBe(lease.lease_epoch);
    const head = expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: taskId, max_bytes: 200 }));
    // Inside the sandbox only the two leased cards' nodes exist, so CUDA/HIP number them 0..1; the
    // host's indexes stay in GPU_BROKER_GPU_IDS.
    expect(head.data).toContain('CUDA_VISIBLE_DEVICES=0,1\n');
    expect(head.data).toContain('HIP_VISIBLE_DEVICES=0,1\n');
    expect(head.data).toContain('GPU_IDS=1,2\n');
    expect(head.data).toContain('NODES=nvidia1 nvidia2\n');
    expect(head.data).toContain(`LEASE_EPOCH=${lease.lease_epoch}\n`);
  });

  it('returns the logs by offset pages and by tail_lines', async () => {
    const whole = expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: taskId }));
    expect(whole.complete).toBe(true);
    expect(whole.next_offset).toBe(whole.total_bytes);
    expect(whole.data.split('\n').filter((l) => l.startsWith('line '))).toHaveLength(200);

    let paged = '';
    let offset = 0;
    let pages = 0;
    while (offset < whole.total_bytes) {
      const page = expectOk(
        await callTool<Logs>(alice, 'get_task_logs', { task_id: taskId, offset, max_bytes: 512 }),
      );
      expect(page.offset).toBe(offset);
      expect(page.next_offset - page.offset).toBeLessThanOrEqual(512);
      expect(page.next_offset).toBeGreaterThan(offset);
      paged += page.data;
      offset = page.next_offset;
      pages++;
    }
    expect(pages).toBeGreaterThan(3);
    expect(paged).toBe(whole.data);

    const tail = expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: taskId, tail_lines: 3 }));
    expect(tail.data).toBe('line 198 of the log\nline 199 of the log\nline 200 of the log\n');
    expect(tail.next_offset).toBe(whole.total_bytes);
    expect(tail.offset).toBe(whole.total_bytes - Buffer.byteLength(tail.data));

    const stderr = expectOk(
      await callTool<Logs>(alice, 'get_task_logs', { task_id: taskId, stream: 'stderr' }),
    );
    expect(stderr.data).toBe('a warning on stderr\n');
  });

  it('returns the declared outputs with their sha256', async () => {
    const listed = expectOk(await callTool<Outputs>(alice, 'get_task_outputs', { task_id: taskId }));
    const content = '{"ok":true,"cards":"0,1"}';
    expect(listed.outputs).toEqual([
      { path: 'metrics/loss.csv', size: 10, sha256: sha256('step,loss\n') },
      { path: 'result.json', size: content.length, sha256: sha256(content) },
    ]);
    const file = expectOk(
      await callTool<Outputs>(alice, 'get_task_outputs', { task_id: taskId, path: 'result.json' }),
    );
    expect(file.file).toEqual({
      truncated: false,
      offset: 0,
      next_offset: content.length,
      size: content.length,
      path: 'result.json',
      encoding: 'utf8',
      content,
    });
  });

  it('released the lease only on the cleanup receipt, after the task exited', async () => {
    const lease = m.store.leases.latestLeaseForTask(taskId)!;
    expect(lease.state).toBe('RELEASED');
    const execution = m.store.leases.executionForLease(lease.id)!;
    expect(execution.phase).toBe('cleaned');
    // The execution moved through its table: one audited compare-and-set move per report (ADR 0014).
    expect(
      m.store.audit.forSubject('execution', execution.id).map((e) => [e.action, e.actor, e.data]),
    ).toEqual(
      [
        ['accepted', 'assigned'],
        ['started', 'accepted'],
        ['exited', 'started'],
        ['cleaned', 'exited'],
      ].map(([to, from]) => [
        `execution.${to}`,
        'worker',
        expect.objectContaining({ from, to, task_id: taskId, lease_epoch: execution.lease_epoch }),
      ]),
    );
    // One ordered chain: granted, ended with the exit, released by the receipt, then the task completed.
    const events = [
      ...m.store.audit.forSubject('lease', lease.id),
      ...m.store.audit.forSubject('task', taskId),
    ]
      .sort((a, b) => a.seq - b.seq)
      .map((e) => e.action)
      .filter((a) => a !== 'task.created');
    expect(events).toEqual([
      'lease.granted',
      'task.lease_granted',
      'task.started',
      'task.exited',
      'lease.execution_ended',
      'lease.cleaned',
      'task.cleaned_success',
    ]);
    const cleaned = m.store.audit.forSubject('lease', lease.id).find((e) => e.action === 'lease.cleaned');
    expect(cleaned).toMatchObject({
      actor: 'worker',
      data: expect.objectContaining({ reason: 'cleanup receipt' }),
    });
    expect(watch.violations).toEqual([]);
    expect(watch.peak()).toBe(2);
  });
});

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
