import { existsSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as serve } from '../../../src/cli/host/serve.js';
import { BrokerError, type ErrorBody } from '../../../src/contracts/errors.js';
import { startMaster } from '../../../src/main.js';
import { silentLogger } from '../../../src/platform/logger.js';
import { runCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster, testConfig } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/** MCP Origin validation (DNS rebinding) and "plain HTTP only on loopback" (docs/security.md). */

let m: TestMaster;
let token: string;

const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
};
const MCP_HEADERS = { accept: 'application/json, text/event-stream' };

beforeAll(async () => {
  m = await startTestMaster({ config: { allowed_origins: ['https://dashboard.example'] } });
  token = m.createToken('alice', ['submitter']);
});

afterAll(async () => {
  await m?.close();
  removeTempDirs();
});

describe('MCP Origin validation', () => {
  it('refuses a foreign Origin with 403 FORBIDDEN, before any tool runs', async () => {
    for (const origin of ['https://evil.example', 'null', 'http://127.0.0.1:1', 'not a url']) {
      const res = await m.rest(token).post<{ error: ErrorBody }>('/mcp', INIT, {
        idempotencyKey: null,
        headers: { ...MCP_HEADERS, origin },
      });
      expect({ origin, status: res.status }).toEqual({ origin, status: 403 });
      expect(res.body.error.code).toBe('FORBIDDEN');
    }
    await expect(m.mcpClient(token, { headers: { Origin: 'https://evil.example' } })).rejects.toThrow(
      /FORBIDDEN/,
    );
  });

  it('refuses a DNS-rebound name even when Origin and Host agree', async () => {
    // The page at rebind.example resolved that name to 127.0.0.1, so the browser sends Origin and Host
    // both naming it. fetch() cannot set Host, hence a raw https request.
    const u = new URL(m.url);
    const send = (name: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = httpsRequest(
          {
            host: u.hostname,
            port: u.port,
            path: '/mcp',
            method: 'POST',
            ca: m.caPem ?? undefined,
            servername: 'localhost',
            headers: {
              ...MCP_HEADERS,
              'content-type': 'application/json',
              authorization: `Bearer ${token}`,
              origin: `https://${name}:${u.port}`,
              host: `${name}:${u.port}`,
            },
          },
          (res) => {
            let body = '';
            res.on('data', (d: Buffer) => {
              body += d.toString();
            });
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify(INIT));
      });
    const rebound = await send('rebind.example');
    expect({ status: rebound.status, body: rebound.body }).toMatchObject({ status: 403 });
    expect(JSON.parse(rebound.body).error.code).toBe('FORBIDDEN');
    // The same request naming the master itself passes the origin check.
    expect((await send('localhost')).status).toBe(200);
  });

  it('accepts no Origin, the master’s own origin, and a configured allowed origin', async () => {
    const host = new URL(m.url).host;
    for (const headers of [{}, { Origin: `https://${host}` }, { Origin: 'https://dashboard.example' }]) {
      const c = await m.mcpClient(token, { headers });
      expectOk(await m.callTool(c, 'list_proposals', {}));
    }
  });
});

describe('--tls off', () => {
  it('is refused on a non-loopback address, before anything is created', async () => {
    for (const host of ['0.0.0.0', '[::]', '10.1.2.3', 'gpu-master.example']) {
      const dataDir = join(makeTempDir('tls-off'), 'data');
      const err = await startMaster({
        dataDir,
        config: testConfig({ listen: `${host}:0`, tls: { mode: 'off' } }),
        logger: silentLogger(),
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(BrokerError);
      expect((err as BrokerError).code).toBe('INVALID_INPUT');
      expect((err as BrokerError).message).toContain('loopback');
      expect(existsSync(dataDir)).toBe(false);
    }
  });

  it('`gpu-broker serve --tls off --listen 0.0.0.0:0` exits 2 with a teaching error', async () => {
    const dataDir = join(makeTempDir('tls-off-cli'), 'data');
    const r = await runCli(serve, ['--tls', 'off', '--listen', '0.0.0.0:0', '--data-dir', dataDir]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/INVALID_INPUT.*loopback/);
    expect(existsSync(join(dataDir, 'broker.db'))).toBe(false);
    const j = await runCli(serve, ['--tls', 'off', '--listen', '0.0.0.0:0', '--data-dir', dataDir, '--json']);
    expect(j.code).toBe(2);
    expect(j.json<{ error: ErrorBody }>().error.code).toBe('INVALID_INPUT');
  });

  it('serves plain HTTP on loopback', async () => {
    const plain = await startTestMaster({ config: { tls: { mode: 'off' } } });
    try {
      expect(plain.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(plain.caCertPath).toBeNull();
      const c = await plain.mcpClient(plain.createToken('alice', ['submitter']));
      expectOk(await plain.callTool(c, 'list_proposals', {}));
    } finally {
      await plain.close();
    }
  });
});

describe('listen address', () => {
  it('a port already in use is a clear UNAVAILABLE error, and nothing is left running', async () => {
    const busy = new URL(m.url).port;
    const dataDir = join(makeTempDir('busy-port'), 'data');
    const err = await startMaster({
      dataDir,
      config: testConfig({ listen: `127.0.0.1:${busy}` }),
      logger: silentLogger(),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerError);
    expect(err).toMatchObject({ code: 'UNAVAILABLE', message: `127.0.0.1:${busy} is already in use` });
    // The busy port still belongs to the first master.
    expect((await m.rest(null).get('/healthz')).status).toBe(200);
  });
});
