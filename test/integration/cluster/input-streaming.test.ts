import { createHash, randomBytes } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BLOB_CHUNK_BYTES } from '../../../src/store/blobs-repo.js';
import {
  approveTask,
  clusterConfig,
  executionDetail,
  shellSpec,
  waitForAvailableCards,
  waitUntilSettled,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * docs/performance.md "Noisy neighbours": an input larger than a store chunk travels from the master's store to the task's file a
 * chunk at a time (the master's route streams verifiedPieces, the worker streams the body into the
 * file and hashes it there), through the real byte routes and a real sandboxed worker. A chunk changed
 * in the master's store is cut off before the body is complete, and the task never runs.
 */
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const SIZE = 3 * BLOB_CHUNK_BYTES + 4321;

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let aliceToken: string;

async function put(bytes: Buffer): Promise<{ sha256: string; size: number }> {
  const res = await m.fetch(`${m.url}/api/v1/blobs/${sha(bytes)}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${aliceToken}`, 'content-type': 'application/octet-stream' },
    body: bytes,
  });
  expect(res.status).toBe(200);
  return { sha256: sha(bytes), size: bytes.length };
}

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({
      policy: { input_quota_bytes: 64 * 1024 * 1024, max_input_bytes: 16 * 1024 * 1024 },
    }),
  });
  aliceToken = m.createToken('alice', ['submitter']);
  alice = await m.mcpClient(aliceToken);
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-stream', { hiddenPaths: [m.dataDir] });
  await waitForAvailableCards(m, 4, 'four available cards on gpu-stream');
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
});

describe('an input of several store chunks', () => {
  it('reaches the task byte for byte', async () => {
    const bytes = randomBytes(SIZE);
    const input = await put(bytes);
    const id = await approveTask(
      alice,
      rita,
      shellSpec('sha256sum data.bin | cut -d" " -f1 > "$GPU_BROKER_OUTPUT_DIR/sum.txt"', {
        inputs: [{ path: 'data.bin', ...input }],
        outputs: [{ path: 'sum.txt', required: true }],
      }),
    );
    const task = await waitUntilSettled(alice, id);
    expect(task, executionDetail(m, id)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const out = expectOk(
      await callTool<{ file: { content: string } | null }>(alice, 'get_task_outputs', {
        task_id: id,
        path: 'sum.txt',
      }),
    );
    expect(out.file!.content.trim()).toBe(input.sha256);
  });

  it('a chunk changed in the master store: the body is cut off, the task fails setup and never runs', async () => {
    const bytes = randomBytes(SIZE);
    const input = await put(bytes);
    m.store.db
      .prepare('UPDATE blob_chunks SET bytes = ? WHERE sha256 = ? AND idx = 2')
      .run(randomBytes(BLOB_CHUNK_BYTES), input.sha256);
    const id = await approveTask(
      alice,
      rita,
      shellSpec('echo ran > "$GPU_BROKER_OUTPUT_DIR/ran.txt"', { inputs: [{ path: 'data.bin', ...input }] }),
    );
    const task = await waitUntilSettled(alice, id);
    expect(task).toMatchObject({ state: 'FAILED', failure_reason: 'SETUP_FAILED', exit_code: null });
    // Cut off in transit (not a complete body with the wrong digest).
    expect(executionDetail(m, id)).toMatch(
      /^input data\.bin: cannot fetch sha256 [0-9a-f]{64} from the master: /,
    );
  });
});
