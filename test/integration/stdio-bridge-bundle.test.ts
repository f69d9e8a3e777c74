import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/platform/package-root.js';
import { startTestMaster, type TestMaster } from '../support/master.js';

/**
 * docs/operations.md: the self-contained stdio bridge (`npm run build:bridge`, one esbuild bundle) runs
 * with plain `node` from a directory with no node_modules anywhere above it, against a real master.
 */

const execFileP = promisify(execFile);

let m: TestMaster;
let dir: string;
let bundle: string;

beforeAll(async () => {
  const root = packageRoot();
  await execFileP(process.execPath, [join(root, 'scripts', 'build-bridge.mjs')], { cwd: root });
  dir = mkdtempSync(join(tmpdir(), 'bridge-bundle-'));
  for (let d = dir; d !== dirname(d); d = dirname(d)) expect(existsSync(join(d, 'node_modules'))).toBe(false);
  bundle = join(dir, 'gpu-broker-stdio-bridge.mjs');
  copyFileSync(join(root, 'dist', 'client-kit', 'gpu-broker-stdio-bridge.mjs'), bundle);
  m = await startTestMaster();
}, 60_000);

afterAll(async () => {
  await m?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Only PATH and the token: no NODE_PATH, nothing of the test runner's environment. */
const env = (token: string) => ({ PATH: process.env['PATH'] ?? '/usr/bin:/bin', GPU_BROKER_TOKEN: token });

describe('the bundled stdio bridge', () => {
  it('lists the same tools as a direct connection, run by plain node outside the package', async () => {
    const token = m.createToken('agent-bundle', ['submitter']);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [bundle, '--url', m.url, '--ca-file', m.caCertPath ?? ''],
      env: env(token),
      cwd: dir,
      stderr: 'pipe',
    });
    const client = new Client({ name: 'bundle-test', version: '0' });
    await client.connect(transport);
    try {
      const direct = await m.mcpClient(token);
      const [bridged, straight] = await Promise.all([client.listTools(), direct.listTools()]);
      expect(bridged.tools.map((t) => t.name)).toContain('create_proposal');
      expect(bridged.tools).toEqual(straight.tools);
    } finally {
      await client.close();
    }
  });

  it('exits 1 with the hint when the master refuses the token', async () => {
    const out = await execFileP(process.execPath, [bundle, '--url', m.url, '--ca-file', m.caCertPath ?? ''], {
      cwd: dir,
      env: env('not-a-token'),
    }).catch((err: { code: number; stderr: string }) => err);
    expect((out as { code: number }).code).toBe(1);
    expect((out as { stderr: string }).stderr).toContain('refused the token in GPU_BROKER_TOKEN (HTTP 401)');
  });
});
