import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { beforeEach, describe, expect, it } from 'vitest';
import { type McpAnswer, type McpPostHeaders, McpPostTransport } from '../../../src/mcp/transport.js';

/**
 * The long-lived `/mcp` transport (docs/decisions/0045-one-mcp-server-per-instructions.md) behind a real
 * SDK `Server`: requests of different clients share the server, so ids are mapped per POST; a client
 * that hangs up cancels its own requests and nobody else's; bad POSTs get the SDK transport's answers.
 */

const HEADERS: McpPostHeaders = {
  accept: 'application/json, text/event-stream',
  contentType: 'application/json',
  protocolVersion: '2025-06-18',
};

function auth(name: string): AuthInfo {
  return { token: 'redacted', clientId: name, scopes: [], extra: { name } };
}

/** A tool call `wait` that answers once `release(name)` is called or its signal aborts. */
interface Harness {
  transport: McpPostTransport;
  release(arg: string): void;
  aborted: string[];
  started: string[];
}

async function harness(): Promise<Harness> {
  const server = new Server({ name: 't', version: '0' }, { capabilities: { tools: {} } });
  const waiting = new Map<string, () => void>();
  const h: Harness = {
    transport: new McpPostTransport(),
    release: (arg) => waiting.get(arg)?.(),
    aborted: [],
    started: [],
  };
  server.setRequestHandler(ListToolsRequestSchema, async (_req, extra) => ({
    tools: [{ name: `for-${String(extra.authInfo?.extra?.['name'])}`, inputSchema: { type: 'object' } }],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const arg = String(req.params.arguments?.['arg']);
    h.started.push(arg);
    if (req.params.name === 'wait')
      await new Promise<void>((resolve) => {
        waiting.set(arg, resolve);
        extra.signal.addEventListener('abort', () => {
          h.aborted.push(arg);
          resolve();
        });
      });
    return { content: [{ type: 'text', text: `${arg} for ${String(extra.authInfo?.clientId)}` }] };
  });
  await server.connect(h.transport);
  return h;
}

function call(id: number | string, name: string, arg: string) {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: { arg } } };
}

const noHangUp = () => {};
const tick = () => new Promise((r) => setImmediate(r));

function json(answer: McpAnswer): unknown {
  return answer.body === null ? null : JSON.parse(answer.body);
}

let h: Harness;
beforeEach(async () => {
  h = await harness();
});

describe('McpPostTransport', () => {
  it('answers two clients that use the same request id at once, each with its own answer and id', async () => {
    const a = h.transport.handle(call(1, 'wait', 'a'), HEADERS, auth('alice'), noHangUp);
    const b = h.transport.handle(call(1, 'wait', 'b'), HEADERS, auth('bob'), noHangUp);
    await tick();
    h.release('b');
    h.release('a');
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.status).toBe(200);
    expect(json(ra)).toEqual({
      jsonrpc: '2.0',
      id: 1,
      result: { content: [{ type: 'text', text: 'a for alice' }] },
    });
    expect(json(rb)).toEqual({
      jsonrpc: '2.0',
      id: 1,
      result: { content: [{ type: 'text', text: 'b for bob' }] },
    });
  });

  it('reads the principal of each POST from its own auth (tools/list differs per caller)', async () => {
    const list = { jsonrpc: '2.0', id: 'x', method: 'tools/list' };
    const a = json(await h.transport.handle(list, HEADERS, auth('alice'), noHangUp)) as {
      id: string;
      result: { tools: Array<{ name: string }> };
    };
    const b = json(await h.transport.handle(list, HEADERS, auth('bob'), noHangUp)) as typeof a;
    expect(a.id).toBe('x');
    expect(a.result.tools.map((t) => t.name)).toEqual(['for-alice']);
    expect(b.result.tools.map((t) => t.name)).toEqual(['for-bob']);
  });

  it('answers a batch with an array of its requests’ responses in order; notifications get nothing', async () => {
    const batch = [
      call('first', 'echo', '1'),
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      { jsonrpc: '2.0', id: 7, method: 'ping' },
      { jsonrpc: '2.0', id: 8, method: 'no/such/method' },
    ];
    const r = await h.transport.handle(batch, HEADERS, auth('alice'), noHangUp);
    expect(r.status).toBe(200);
    const out = json(r) as Array<{ id: unknown; result?: unknown; error?: { code: number } }>;
    expect(out.map((m) => m.id)).toEqual(['first', 7, 8]);
    expect(out[1]!.result).toEqual({});
    expect(out[2]!.error?.code).toBe(-32601);
  });

  it('answers 202 with no body to notifications alone', async () => {
    const r = await h.transport.handle(
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      HEADERS,
      auth('alice'),
      noHangUp,
    );
    expect(r).toEqual({ status: 202, body: null });
  });

  it('cancels the requests of a POST whose client hung up, and writes nothing for them', async () => {
    let cancel: (() => void) | null = null;
    const a = h.transport.handle(call(1, 'wait', 'a'), HEADERS, auth('alice'), (c) => {
      cancel = c;
    });
    const b = h.transport.handle(call(1, 'wait', 'b'), HEADERS, auth('bob'), noHangUp);
    await tick();
    expect(h.started).toEqual(['a', 'b']);
    cancel!();
    expect((await a).body).toBeNull();
    expect(h.aborted).toEqual(['a']);
    h.release('b');
    expect(json(await b)).toMatchObject({ id: 1, result: {} });
  });

  it('drops a client’s notifications/cancelled: in stateless HTTP it can only name another POST’s request', async () => {
    const a = h.transport.handle(call(1, 'wait', 'a'), HEADERS, auth('alice'), noHangUp);
    await tick();
    // Mallory guesses the id the server knows alice's request by, and the one alice sent.
    for (const requestId of [1, 2, 0])
      expect(
        await h.transport.handle(
          { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId } },
          HEADERS,
          auth('mallory'),
          noHangUp,
        ),
      ).toEqual({ status: 202, body: null });
    await tick();
    expect(h.aborted).toEqual([]);
    h.release('a');
    expect(json(await a)).toMatchObject({ id: 1, result: {} });
  });

  it('refuses what the SDK transport refuses, with its statuses and JSON-RPC codes, running nothing', async () => {
    const cases: Array<[unknown, Partial<McpPostHeaders>, number, number]> = [
      [call(1, 'echo', 'x'), { accept: 'application/json' }, 406, -32000],
      [call(1, 'echo', 'x'), { contentType: 'text/plain' }, 415, -32000],
      [undefined, {}, 400, -32700],
      [{ not: 'json-rpc' }, {}, 400, -32700],
      ['a string', {}, 400, -32700],
      [Array.from({ length: 101 }, (_, i) => call(i, 'echo', 'x')), {}, 400, -32600],
      [
        [
          {
            jsonrpc: '2.0',
            id: 1,
            method: 'initialize',
            params: {
              protocolVersion: '2025-06-18',
              capabilities: {},
              clientInfo: { name: 'c', version: '0' },
            },
          },
          call(2, 'echo', 'x'),
        ],
        {},
        400,
        -32600,
      ],
      [call(1, 'echo', 'x'), { protocolVersion: '1999-01-01' }, 400, -32000],
    ];
    for (const [body, headers, status, code] of cases) {
      const r = await h.transport.handle(body, { ...HEADERS, ...headers }, auth('alice'), noHangUp);
      expect(r.status, JSON.stringify(headers)).toBe(status);
      expect(json(r)).toMatchObject({ jsonrpc: '2.0', id: null, error: { code } });
    }
    expect(h.started).toEqual([]);
  });

  it('accepts a content type with parameters and an initialize whatever the version header says', async () => {
    const init = {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '0' } },
    };
    const r = await h.transport.handle(
      init,
      { ...HEADERS, contentType: 'application/json; charset=utf-8', protocolVersion: '1999-01-01' },
      auth('alice'),
      noHangUp,
    );
    expect(r.status).toBe(200);
    expect(json(r)).toMatchObject({ id: 0, result: { protocolVersion: '2025-06-18' } });
  });

  it('answers the requests still open with an error when it closes, and later POSTs 503', async () => {
    const a = h.transport.handle(call(5, 'wait', 'a'), HEADERS, auth('alice'), noHangUp);
    await tick();
    await h.transport.close();
    expect(json(await a)).toMatchObject({ id: 5, error: { code: -32000 } });
    const later = await h.transport.handle(call(6, 'echo', 'b'), HEADERS, auth('alice'), noHangUp);
    expect(later.status).toBe(503);
    expect(h.started).toEqual(['a']);
  });
});
