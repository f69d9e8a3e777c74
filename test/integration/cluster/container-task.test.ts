import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Finding } from '../../../src/domain/policy/evaluate.js';
import {
  approveTask,
  clusterConfig,
  waitForAvailableCards,
  waitUntilSettled,
} from '../../support/cluster.js';
import type { TestImage } from '../../support/container-image.js';
import { testImage } from '../../support/container-image.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * A container task through a real master and a real worker (8 simulated cards, this machine's podman
 * and runc, the locally built busybox image): reviewed, scheduled on 2 cards, run in a container that
 * sees exactly those cards' nodes, its output returned and its lease released by the cleanup receipt.
 * An image neither pinned nor listed in the policy is an error finding.
 */

let image: TestImage;
let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;

beforeAll(async () => {
  image = await testImage();
  m = await startTestMaster({
    config: clusterConfig({ policy: { images: [{ ref: image.tag, digest: image.digest }] } }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-containers', { simCards: 8, containerEngine: 'auto' });
  await waitForAvailableCards(m, 8, 'eight available cards on gpu-containers');
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
  image?.cleanup();
});

const SCRIPT = [
  'echo "NODES=$(cd /dev && echo nvidia*)"',
  'echo "VISIBLE=$CUDA_VISIBLE_DEVICES UID=$(id -u)"',
  'echo "{\\"ok\\":true}" > "$GPU_BROKER_OUTPUT_DIR/result.json"',
].join('; ');

describe('a container task, end to end', () => {
  for (const [how, ref] of [
    ['pinned by digest in the spec', () => image.pinned],
    ['listed in policy.images with its digest', () => image.tag],
  ] as const) {
    it(`completes on 2 of the 8 cards, ${how}`, async () => {
      const taskId = await approveTask(
        alice,
        rita,
        validSpec({
          cards: { count: 2 },
          runtime: { kind: 'container', image: ref(), argv: ['sh', '-c', SCRIPT] },
          outputs: [{ path: 'result.json', required: true }],
        }),
      );
      const task = await waitUntilSettled(alice, taskId, 60_000);
      expect(task).toMatchObject({ state: 'COMPLETED', exit_code: 0, failure_reason: null });
      expect(task.cards).toHaveLength(2);
      const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
      const nodes = task.cards.map((c) => `nvidia${c.index}`).join(' ');
      expect(logs.data).toContain(`NODES=${nodes}\n`);
      expect(logs.data).toMatch(/VISIBLE=0,1 UID=[1-9]/);
      const file = expectOk(
        await callTool<{ file: { content: string } | null }>(alice, 'get_task_outputs', {
          task_id: taskId,
          path: 'result.json',
        }),
      );
      expect(file.file?.content).toBe('{"ok":true}\n');
      expect(m.store.leases.latestLeaseForTask(taskId)?.state).toBe('RELEASED');
    });
  }

  it('an image neither pinned nor listed is an error finding', async () => {
    const r = expectOk(
      await callTool<{ findings: Finding[]; confirmable: boolean }>(alice, 'create_proposal', {
        spec: validSpec({ runtime: { kind: 'container', image: 'localhost/other:latest', argv: ['true'] } }),
        idempotency_key: `unpinned-${Date.now()}`,
      }),
    );
    expect(r.confirmable).toBe(false);
    expect(r.findings.map((f) => `${f.severity}:${f.code}`)).toContain('error:IMAGE_NOT_PINNED');
  });
});
