import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { packageRoot } from '../../src/platform/package-root.js';
import { createCaTrustingFetch, type DevTls, ensureDevTls } from '../../src/platform/tls.js';
import { waitFor } from '../support/wait.js';

/**
 * The stdio bridge as a real child process, between the SDK's stdio client and a small real MCP
 * server over HTTPS (stateless JSON mode, like the master). The bridge is compiled on its own with
 * tsc (its import graph only: client-kit + src/platform + src/contracts/errors), so files other
 * people are editing elsewhere in src/ cannot break this test; tsx is not installed.
 */

const TOKEN = 'test-token-0123456789abcdef0123456789abcdef';
const root = packageRoot();
const execFileP = promisify(execFile);

let work: string;
let bridgeMain: string;
let tls: DevTls;
let port: number;
let server: Server | undefined;
/** Calls of `record_call` that reached the server, to prove nothing is submitted twice. */
let submissions = 0;

const LooseList = z.looseObject({ tools: z.array(z.looseObject({ name: z.string() })) });

function buildMcpServer(): McpServer {
  const mcp = new McpServer(
    { name: 'fake-master', version: '9.9.9' },
    { instructions: 'Use the fake tools.' },
  );
  mcp.registerTool(
    'echo',
    {
      title: 'Echo',
      description: 'Echoes text with its length.',
      inputSchema: z.strictObject({ text: z.string() }),
      outputSchema: z.object({ text: z.string(), length: z.number().int() }),
      annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async ({ text }) => {
      const out = { text, length: text.length };
      return { content: [{ type: 'text', text: JSON.stringify(out) }], structuredContent: out };
    },
  );
  mcp.registerTool(
    'refuse',
    {
      description: 'Always fails with a broker error.',
      inputSchema: z.strictObject({ idempotency_key: z.string() }),
      outputSchema: z.object({ ok: z.boolean() }),
      annotations: {
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
    },
    async () => ({
      isError: true,
      content: [
        {
          type: 'text',
          text: JSON.stringify({
            code: 'POLICY_VIOLATION',
            message: 'argv[0] is not allowed',
            hint: 'use /usr/bin/python3',
            retryable: false,
          }),
        },
      ],
    }),
  );
  mcp.registerTool(
    'record_call',
    {
      description: 'Counts submissions; the HTTP layer drops the connection after counting.',
      inputSchema: z.strictObject({ idempotency_key: z.string() }),
      annotations: {
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
    },
    async () => ({ content: [{ type: 'text', text: 'recorded' }] }),
  );
  return mcp;
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.headers.authorization !== `Bearer ${TOKEN}`) {
    res.writeHead(401, { 'www-authenticate': 'Bearer' }).end('{"error":"unauthenticated"}');
    return;
  }
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'POST' }).end();
    return;
  }
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { params?: { name?: string } };
  if (body.params?.name === 'record_call') {
    submissions++;
    // The request arrived and "ran"; the reply is lost, as when a master dies mid-call.
    req.socket.destroy();
    return;
  }
  const mcp = buildMcpServer();
  const transport = new StreamableHTTPServerTransport({ enableJsonResponse: true });
  res.on('close', () => {
    void transport.close();
    void mcp.close();
  });
  await mcp.connect(transport);
  await transport.handleRequest(req, res, body);
}

async function startServer(listenPort = 0): Promise<void> {
  const s = createServer({ cert: tls.cert, key: tls.key }, (req, res) => {
    handle(req, res).catch(() => res.writeHead(500).end());
  });
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject);
    s.listen(listenPort, '127.0.0.1', resolve);
  });
  server = s;
  port = (s.address() as AddressInfo).port;
}

async function stopServer(): Promise<void> {
  const s = server;
  server = undefined;
  if (!s) return;
  s.closeAllConnections();
  await new Promise((resolve) => s.close(resolve));
}

function bridgeArgs(): string[] {
  return [bridgeMain, '--url', `https://127.0.0.1:${port}`, '--ca-file', tls.caCertPath];
}

async function connectBridge(token = TOKEN): Promise<{ client: Client; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: bridgeArgs(),
    env: { GPU_BROKER_TOKEN: token },
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr?.on('data', (d: Buffer) => {
    log += d.toString();
  });
  const client = new Client({ name: 'bridge-test', version: '0.0.0' });
  await client.connect(transport);
  return { client, stderr: () => log };
}

async function connectDirect(): Promise<{ client: Client; close: () => Promise<void> }> {
  const trusting = createCaTrustingFetch(tls.ca);
  const transport = new StreamableHTTPClientTransport(new URL(`https://127.0.0.1:${port}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } },
    fetch: trusting.fetch,
  });
  const client = new Client({ name: 'direct-test', version: '0.0.0' });
  await client.connect(transport);
  return {
    client,
    close: async () => {
      await client.close();
      await trusting.close();
    },
  };
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'gpu-broker-bridge-'));
  tls = await ensureDevTls(join(work, 'data'), {});
  const out = join(work, 'build');
  await mkdir(out, { recursive: true });
  // Bare imports (the SDK, zod, undici) resolve through this link to the repo's node_modules.
  await symlink(join(root, 'node_modules'), join(out, 'node_modules'), 'dir');
  await writeFile(join(out, 'package.json'), JSON.stringify({ type: 'module', version: '0.0.0-test' }));
  const tsconfig = join(work, 'tsconfig.json');
  await writeFile(
    tsconfig,
    JSON.stringify({
      extends: join(root, 'tsconfig.json'),
      compilerOptions: { noEmit: false, outDir: out, rootDir: root, sourceMap: false, incremental: false },
      files: [join(root, 'client-kit', 'stdio-bridge-main.ts')],
      include: [],
    }),
  );
  bridgeMain = join(out, 'client-kit', 'stdio-bridge-main.js');
  // tsc still emits when a type error shows up in a shared file someone is editing; the bridge's own
  // types are checked by `tsc --noEmit` in CI, so here only a missing output is fatal.
  await execFileP(process.execPath, [
    join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
    '-p',
    tsconfig,
  ]).catch((err: unknown) => {
    if (!existsSync(bridgeMain)) throw err;
  });
  await startServer();
}, 120_000);

afterAll(async () => {
  await stopServer();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('stdio bridge (child process)', () => {
  it('forwards tools/list, structuredContent and isError results unchanged', async () => {
    const direct = await connectDirect();
    const { client } = await connectBridge();
    try {
      const viaDirect = await direct.client.request({ method: 'tools/list', params: {} }, LooseList);
      const viaBridge = await client.request({ method: 'tools/list', params: {} }, LooseList);
      expect(viaBridge).toEqual(viaDirect);
      expect(viaBridge.tools.map((t) => t.name).sort()).toEqual(['echo', 'record_call', 'refuse']);
      expect(client.getInstructions()).toBe('Use the fake tools.');

      const echoArgs = { name: 'echo', arguments: { text: 'héllo' } };
      const echoDirect = await direct.client.request(
        { method: 'tools/call', params: echoArgs },
        CallToolResultSchema,
      );
      const echo = await client.request({ method: 'tools/call', params: echoArgs }, CallToolResultSchema);
      expect(echo).toEqual(echoDirect);
      expect(echo.structuredContent).toEqual({ text: 'héllo', length: 5 });

      // The high-level callTool validates structuredContent against the outputSchema from tools/list.
      await client.listTools();
      const checked = await client.callTool({ name: 'echo', arguments: { text: 'x' } });
      expect(checked.structuredContent).toEqual({ text: 'x', length: 1 });

      const refuseArgs = { name: 'refuse', arguments: { idempotency_key: 'k1' } };
      const refusedDirect = await direct.client.request(
        { method: 'tools/call', params: refuseArgs },
        CallToolResultSchema,
      );
      const refused = await client.request(
        { method: 'tools/call', params: refuseArgs },
        CallToolResultSchema,
      );
      expect(refused).toEqual(refusedDirect);
      expect(refused.isError).toBe(true);
      expect(JSON.parse((refused.content[0] as { text: string }).text).code).toBe('POLICY_VIOLATION');

      // Input validation failures come back from the server as isError results, also unchanged.
      const badArgs = { name: 'echo', arguments: { text: 'x', extra: 1 } };
      const bad = await client.request({ method: 'tools/call', params: badArgs }, CallToolResultSchema);
      const badDirect = await direct.client.request(
        { method: 'tools/call', params: badArgs },
        CallToolResultSchema,
      );
      expect(bad).toEqual(badDirect);
      expect(bad.isError).toBe(true);
    } finally {
      await client.close();
      await direct.close();
    }
  });

  it('exits non-zero at start on a refused token, with the hint on stderr and without echoing it', async () => {
    const refused = await execFileP(process.execPath, bridgeArgs(), {
      env: { PATH: process.env['PATH'] ?? '', GPU_BROKER_TOKEN: 'wrong-token-value' },
    }).catch((err: { code: number; stdout: string; stderr: string }) => err);
    const { code, stdout, stderr } = refused as { code: number; stdout: string; stderr: string };
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toContain('refused the token in GPU_BROKER_TOKEN (HTTP 401)');
    expect(stderr).toContain('gpu-broker token create');
    expect(stderr).not.toContain('wrong-token-value');
  });

  it('survives the master restarting and never resubmits a call that may have run', async () => {
    const { client } = await connectBridge();
    try {
      expect((await client.listTools()).tools.length).toBe(3);
      const samePort = port;
      await stopServer();

      const down = await client.request(
        { method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } },
        CallToolResultSchema,
      );
      expect(down.isError).toBe(true);
      expect(JSON.parse((down.content[0] as { text: string }).text)).toMatchObject({
        code: 'UNAVAILABLE',
        retryable: true,
      });
      await expect(client.listTools()).rejects.toThrow(/unreachable/);

      await startServer(samePort);
      const up = await client.request(
        { method: 'tools/call', params: { name: 'echo', arguments: { text: 'back' } } },
        CallToolResultSchema,
      );
      expect(up.structuredContent).toEqual({ text: 'back', length: 4 });
      expect((await client.listTools()).tools.length).toBe(3);

      submissions = 0;
      const lost = await client.request(
        { method: 'tools/call', params: { name: 'record_call', arguments: { idempotency_key: 'k2' } } },
        CallToolResultSchema,
      );
      expect(submissions).toBe(1);
      expect(lost.isError).toBe(true);
      const body = JSON.parse((lost.content[0] as { text: string }).text);
      expect(body.code).toBe('UNAVAILABLE');
      expect(body.message).toContain('may or may not have taken effect');
      expect(body.hint).toContain('same idempotency_key');
    } finally {
      await client.close();
    }
  });

  it('exits with code 0 when stdin closes and on SIGTERM, logging only to stderr', async () => {
    for (const how of ['stdin', 'sigterm'] as const) {
      const child = spawn(process.execPath, bridgeArgs(), {
        env: { ...process.env, GPU_BROKER_TOKEN: TOKEN },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
      });
      child.stderr.on('data', (d: Buffer) => {
        stderr += d.toString();
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      await waitFor(() => stderr.includes('serving MCP on stdio'), {
        timeoutMs: 15_000,
        what: 'the bridge to serve MCP on stdio',
      });
      if (how === 'stdin') child.stdin.end();
      else child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(stdout).toBe('');
      expect(stderr).toMatch(
        how === 'stdin' ? /shutting down: stdin (ended|closed)/ : /shutting down: stop requested/,
      );
    }
  });

  it('refuses a token on the command line and a missing token', async () => {
    const withFlag = await execFileP(process.execPath, [...bridgeArgs(), '--token', 'abc'], {
      env: { PATH: process.env['PATH'] ?? '' },
    }).catch((err: { code: number; stderr: string }) => err);
    expect((withFlag as { code: number }).code).toBe(2);
    expect((withFlag as { stderr: string }).stderr).toContain('never taken from the command line');

    const noToken = await execFileP(process.execPath, bridgeArgs(), {
      env: { PATH: process.env['PATH'] ?? '' },
    }).catch((err: { code: number; stderr: string }) => err);
    expect((noToken as { code: number }).code).toBe(2);
    expect((noToken as { stderr: string }).stderr).toContain('set GPU_BROKER_TOKEN');
  });
});
