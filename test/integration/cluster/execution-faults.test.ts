import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskView } from '../../../src/contracts/views.js';
import {
  approveTask,
  clusterConfig,
  type LeaseWatch,
  shellSpec,
  waitUntilSettled,
  watchLeaseCards,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Tasks that misbehave on a real worker: one ignores SIGTERM past its time limit, one is cancelled
 * while it runs, one declares an output that is a symlink out of its output directory. Each ends in
 * the right state with the right failure_reason, and its lease is released by the cleanup receipt.
 */

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
  w = await startWorkerOn(m, 'gpu-faults', { simCards: 4 });
  await waitFor(() => m.deps.cluster.fleet.isOnline('gpu-faults', Date.now()));
});

afterAll(async () => {
  watch?.stop();
  await w?.close();
  await m?.close();
});

function leaseState(taskId: string): string | undefined {
  return m.store.leases.latestLeaseForTask(taskId)?.state;
}

async function logs(taskId: string): Promise<string> {
  return expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId })).data;
}

describe('misbehaving tasks', () => {
  it('a task ignoring SIGTERM past its time limit is killed: TIMED_OUT', async () => {
    const id = await approveTask(
      alice,
      rita,
      shellSpec(`trap 'echo got TERM' TERM; echo armed; while :; do sleep 0.1; done`, {
        time_limit_seconds: 1,
      }),
    );
    const done = await waitUntilSettled(alice, id);
    expect(done).toMatchObject({ state: 'FAILED', failure_reason: 'TIMED_OUT', signal: 'SIGKILL' });
    // It was asked to stop first (SIGTERM, which it ignored), then killed after the grace period.
    expect(await logs(id)).toMatch(/^armed\n(got TERM\n)+$/);
    expect(leaseState(id)).toBe('RELEASED');
    expect(m.store.leases.executionForLease(m.store.leases.latestLeaseForTask(id)!.id)?.phase).toBe(
      'cleaned',
    );
  });

  it('cancel while running: CANCELLED only after the cleanup receipt, lease released', async () => {
    const id = await approveTask(
      alice,
      rita,
      shellSpec(`trap 'echo stopping; exit 143' TERM; echo running; while :; do sleep 0.1; done`),
    );
    await waitFor(async () => (await logs(id)).includes('running'), { what: 'the task running' });
    const seenStates: string[] = [];
    const off = m.deps.notifier.onAny(() => {
      const t = m.store.tasks.get(id)!;
      const entry = `${t.state}/${leaseState(id)}`;
      if (seenStates.at(-1) !== entry) seenStates.push(entry);
    });
    const cancelled = expectOk(
      await callTool<{ task: TaskView }>(alice, 'cancel_task', {
        task_id: id,
        idempotency_key: `cancel-${id}`,
      }),
    );
    expect(cancelled.task).toMatchObject({ state: 'RUNNING', desired: 'cancel' });
    const done = await waitUntilSettled(alice, id);
    off();
    expect(done).toMatchObject({ state: 'CANCELLED', failure_reason: 'CANCELLED' });
    expect(await logs(id)).toBe('running\nstopping\n');
    expect(leaseState(id)).toBe('RELEASED');
    // The task was CANCELLED only once the lease was released, never with its cards still held.
    expect(seenStates.filter((s) => s.startsWith('CANCELLED/'))).toEqual(['CANCELLED/RELEASED']);
    expect(seenStates).toContain('FINALIZING/RELEASING');
    expectError(
      await callTool(alice, 'cancel_task', { task_id: id, idempotency_key: `cancel-again-${id}` }),
      'INVALID_STATE',
    );
  });

  it('an output that escapes through a symlink is refused: OUTPUT_MISSING, file not returned', async () => {
    const id = await approveTask(
      alice,
      rita,
      shellSpec(
        [
          'cd "$GPU_BROKER_OUTPUT_DIR"',
          'ln -s /etc/passwd result.json',
          'ln -s /etc escaped',
          'echo "fine" > notes.txt',
        ].join('\n'),
        {
          outputs: [
            { path: 'result.json', required: true },
            { path: 'escaped/hostname', required: false },
            { path: 'notes.txt', required: false },
          ],
        },
      ),
    );
    const done = await waitUntilSettled(alice, id);
    expect(done).toMatchObject({ state: 'FAILED', failure_reason: 'OUTPUT_MISSING', exit_code: 0 });
    const outputs = expectOk(
      await callTool<{ outputs: Array<{ path: string }> }>(alice, 'get_task_outputs', { task_id: id }),
    );
    expect(outputs.outputs.map((o) => o.path)).toEqual(['notes.txt']);
    for (const path of ['result.json', 'escaped/hostname'])
      expectError(await callTool(alice, 'get_task_outputs', { task_id: id, path }), 'NOT_FOUND');
    const execution = m.store.leases.executionForLease(m.store.leases.latestLeaseForTask(id)!.id)!;
    expect(execution.detail).toContain('is a symlink');
    expect(leaseState(id)).toBe('RELEASED');
  });

  it('never leased a card twice meanwhile', () => {
    expect(watch.violations).toEqual([]);
    expect(watch.checks()).toBeGreaterThan(10);
  });
});
