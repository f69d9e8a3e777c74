import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_RESULT_BYTES } from '../../../src/contracts/tools-tasks.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import { approveTask, clusterConfig, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Results sized for agents (docs/operations.md), on a real master and worker through the MCP SDK client:
 * get_task_logs and get_task_outputs return 16 KiB by default with their paging fields first — in the
 * text content a client may cut to a short preview too — and a text file pages on character
 * boundaries, so every page stays utf8 and the pages join to the file.
 */

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let taskId: string;

// 40 000 bytes of stdout; a file of one ASCII byte then 20 000 two-byte characters (40 001 bytes), so a
// 16 384-byte page would end inside a character.
const FILE = `x${'é'.repeat(20_000)}`;
const SCRIPT = [
  'i=1; while [ $i -le 2000 ]; do printf "line %014d\\n" $i; i=$((i+1)); done',
  `printf 'x' > "$GPU_BROKER_OUTPUT_DIR/big.txt"`,
  `i=1; while [ $i -le 200 ]; do printf '${'é'.repeat(100)}' >> "$GPU_BROKER_OUTPUT_DIR/big.txt"; i=$((i+1)); done`,
].join('\n');

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  const rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-paging', { sampler: new SimSampler({ count: 1, seed: 'paging' }) });
  taskId = await approveTask(
    alice,
    rita,
    shellSpec(SCRIPT, { outputs: [{ path: 'big.txt', required: true }] }),
  );
  expect((await waitUntilSettled(alice, taskId)).state).toBe('COMPLETED');
  await rita.close();
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
});

describe('get_task_logs', () => {
  it('returns 16 KiB by default, paging fields first', async () => {
    const raw = await alice.callTool({ name: 'get_task_logs', arguments: { task_id: taskId } });
    const text = (raw.content as Array<{ text: string }>)[0]!.text;
    expect(
      text.startsWith(
        '{"complete":true,"truncated":true,"offset":0,"next_offset":16384,"total_bytes":40000,',
      ),
    ).toBe(true);
    const page = raw.structuredContent as { data: string; next_offset: number };
    expect(Buffer.byteLength(page.data)).toBe(DEFAULT_RESULT_BYTES);
  });

  it('a last page or a whole short tail is not truncated at its end', async () => {
    const last = expectOk(
      await callTool<{ truncated: boolean; next_offset: number }>(alice, 'get_task_logs', {
        task_id: taskId,
        offset: 32768,
      }),
    );
    expect(last).toMatchObject({ truncated: true, next_offset: 40000 }); // bytes before it exist
    const all = expectOk(
      await callTool<{ truncated: boolean }>(alice, 'get_task_logs', {
        task_id: taskId,
        stream: 'stderr',
      }),
    );
    expect(all.truncated).toBe(false);
  });
});

describe('get_task_outputs', () => {
  it('returns a 16 KiB utf8 page ending on a character boundary, paging fields first, and pages to the whole file', async () => {
    const first = expectOk(
      await callTool<{ file: Record<string, unknown> }>(alice, 'get_task_outputs', {
        task_id: taskId,
        path: 'big.txt',
      }),
    );
    expect(Object.keys(first.file).slice(0, 4)).toEqual(['truncated', 'offset', 'next_offset', 'size']);
    expect(first.file).toMatchObject({
      truncated: true,
      offset: 0,
      next_offset: DEFAULT_RESULT_BYTES - 1,
      size: Buffer.byteLength(FILE),
      encoding: 'utf8',
    });
    let joined = '';
    let offset = 0;
    for (;;) {
      const page = expectOk(
        await callTool<{ file: { next_offset: number; content: string; encoding: string } }>(
          alice,
          'get_task_outputs',
          { task_id: taskId, path: 'big.txt', offset },
        ),
      );
      expect(page.file.encoding).toBe('utf8');
      joined += page.file.content;
      if (page.file.next_offset === Buffer.byteLength(FILE)) break;
      offset = page.file.next_offset;
    }
    expect(joined).toBe(FILE);
  });
});
