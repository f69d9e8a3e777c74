import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from '../support/build.js';
import { builtCliPath, spawnCli } from '../support/cli.js';
import { approveTask, clusterConfig, shellSpec, waitUntilSettled } from '../support/cluster.js';
import { startTestMaster, type TestMaster } from '../support/master.js';
import { callTool, expectError, expectOk } from '../support/mcp.js';
import { startWorkerOn, type TestWorker } from '../support/worker.js';

/**
 * `gpu-broker mcp-stdio` against the real master: the MCP SDK's stdio client, talking to the built CLI
 * as a child process, sees the same tools as a direct HTTPS connection with the same token and drives a
 * whole proposal → independent review → task loop through it.
 */

let m: TestMaster;
let worker: TestWorker;
let viaStdio: Client;
let direct: Client;
let reviewer: Client;
let transport: StdioClientTransport;

beforeAll(async () => {
  ensureBuilt();
  m = await startTestMaster({ config: clusterConfig() });
  worker = await startWorkerOn(m, 'gpu-stdio', { simCards: 2 });
  const agentToken = m.createToken('agent', ['submitter']);
  direct = await m.mcpClient(agentToken);
  reviewer = await m.mcpClient(m.createToken('rita', ['reviewer']));
  transport = new StdioClientTransport({
    command: process.execPath,
    args: [builtCliPath(), 'mcp-stdio', '--url', m.url, '--ca-file', m.caCertPath ?? ''],
    env: { ...(process.env as Record<string, string>), GPU_BROKER_TOKEN: agentToken },
    stderr: 'pipe',
  });
  viaStdio = new McpClient({ name: 'stdio-test', version: '0' });
  await viaStdio.connect(transport);
});

afterAll(async () => {
  await viaStdio?.close();
  await worker?.close();
  await m?.close();
});

describe('gpu-broker mcp-stdio through the real master', () => {
  it('lists exactly the tools a direct HTTPS connection with the same token lists', async () => {
    const [bridged, straight] = await Promise.all([viaStdio.listTools(), direct.listTools()]);
    expect(bridged.tools.map((t) => t.name)).toContain('create_proposal');
    expect(bridged.tools.map((t) => t.name)).not.toContain('submit_review');
    expect(bridged.tools).toEqual(straight.tools);
  });

  it('runs a whole proposal → review → task loop', async () => {
    const spec = shellSpec('echo via-stdio; echo result > "$GPU_BROKER_OUTPUT_DIR/r.txt"', {
      outputs: [{ path: 'r.txt', required: true }],
    });
    const taskId = await approveTask(viaStdio, reviewer, spec);
    const task = await waitUntilSettled(viaStdio, taskId);
    expect(task).toMatchObject({ state: 'COMPLETED', exit_code: 0, worker_id: 'gpu-stdio' });
    const logs = expectOk(await callTool<{ data: string }>(viaStdio, 'get_task_logs', { task_id: taskId }));
    expect(logs.data).toContain('via-stdio');
    const out = expectOk(
      await callTool<{ file: { content: string } }>(viaStdio, 'get_task_outputs', {
        task_id: taskId,
        path: 'r.txt',
      }),
    );
    expect(out.file.content).toBe('result\n');
  });

  it('passes isError results through unchanged', async () => {
    const bridged = expectError(await callTool(viaStdio, 'get_task', { task_id: 'task_nope' }), 'NOT_FOUND');
    const straight = expectError(await callTool(direct, 'get_task', { task_id: 'task_nope' }), 'NOT_FOUND');
    expect(bridged).toEqual(straight);
  });

  it('exits non-zero at start with the hint on stderr when the master refuses the token (401, 403)', async () => {
    const workerToken = m.createToken('w-for-bridge', ['worker'], 'gpu-other');
    for (const [token, status, hint] of [
      ['not-a-real-token', 401, 'gpu-broker token create'],
      [workerToken, 403, 'worker tokens are valid only on the worker endpoint'],
    ] as const) {
      const out = await spawnCli(['mcp-stdio', '--url', m.url, '--ca-file', m.caCertPath ?? ''], {
        env: { GPU_BROKER_TOKEN: token },
      });
      expect(out.code, out.stderr).toBe(1);
      expect(out.stdout).toBe('');
      expect(out.stderr).toContain(`(HTTP ${status})`);
      expect(out.stderr).toContain(hint);
      expect(out.stderr).not.toContain(token);
    }
  });
});
