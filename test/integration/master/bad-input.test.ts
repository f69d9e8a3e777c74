import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import type { ErrorBody } from '../../../src/contracts/errors.js';
import { MAX_SPEC_BYTES } from '../../../src/contracts/task-spec.js';
import { type RowCounts, startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { DISALLOWED_EXECUTABLE, specRunning, validSpec } from '../../support/spec.js';

/**
 * Bad input changes nothing and gets a typed error: unknown fields, wrong types, oversized specs,
 * path traversal in outputs, disallowed executables, missing or revoked tokens.
 */

let m: TestMaster;
let alice: Client;
let aliceToken: string;
let before: RowCounts;

beforeAll(async () => {
  m = await startTestMaster();
  aliceToken = m.createToken('alice', ['submitter']);
  alice = await m.mcpClient(aliceToken);
});

afterAll(async () => {
  await m?.close();
});

beforeEach(() => {
  before = m.counts();
});

async function createRefused(spec: unknown, extra: Record<string, unknown> = {}): Promise<ErrorBody> {
  const r = await m.callTool(alice, 'create_proposal', { spec, idempotency_key: m.key(), ...extra });
  if (r.ok) throw new Error(`create_proposal accepted ${JSON.stringify(spec).slice(0, 200)}`);
  expect(m.counts()).toEqual(before);
  return r.error;
}

describe('malformed specs are refused with INVALID_INPUT and change nothing', () => {
  it('unknown fields, at the top level, in the spec and nested', async () => {
    expect((await createRefused(validSpec(), { extra: 1 })).code).toBe('INVALID_INPUT');
    const e = await createRefused({ ...validSpec(), gpu_hours: 3 });
    expect(e.code).toBe('INVALID_INPUT');
    expect(e.message).toContain('gpu_hours');
    expect((await createRefused(validSpec({ cards: { count: 1, vendor: 'x' } as never }))).code).toBe(
      'INVALID_INPUT',
    );
    expect(
      (
        await createRefused(
          validSpec({ runtime: { kind: 'process', argv: ['/bin/sh'], shell: true } as never }),
        )
      ).code,
    ).toBe('INVALID_INPUT');
  });

  it('wrong types and out-of-range values name the field', async () => {
    const cases: Array<[unknown, string]> = [
      [validSpec({ cards: { count: '2' as never } }), 'cards.count'],
      [validSpec({ cards: { count: 0 } }), 'cards.count'],
      [validSpec({ cards: { count: 65 } }), 'cards.count'],
      [validSpec({ time_limit_seconds: 1.5 }), 'time_limit_seconds'],
      [validSpec({ title: '' }), 'title'],
      [validSpec({ runtime: { kind: 'vm' as never, argv: ['/bin/sh'] } }), 'runtime.kind'],
      [validSpec({ runtime: { kind: 'container', argv: ['/bin/sh'] } as never }), 'runtime.image'],
      [validSpec({ runtime: { kind: 'process', argv: [] } }), 'runtime.argv'],
      [
        validSpec({ runtime: { kind: 'process', argv: ['/bin/sh'], env: { 'BAD-NAME': 'x' } } }),
        'runtime.env',
      ],
      ['not an object', 'spec'],
    ];
    for (const [spec, field] of cases) {
      const e = await createRefused(spec);
      expect({ field, code: e.code }).toEqual({ field, code: 'INVALID_INPUT' });
      expect(e.message).toContain(field);
      expect(e.hint.length).toBeGreaterThan(0);
    }
    expect((await createRefused(validSpec(), { idempotency_key: 42 })).code).toBe('INVALID_INPUT');
    const noKey = await m.callTool(alice, 'create_proposal', { spec: validSpec() });
    expect(expectError(noKey, 'INVALID_INPUT').message).toContain('idempotency_key');
    expect(m.counts()).toEqual(before);
  });

  it('a spec over 256 KiB is PAYLOAD_TOO_LARGE', async () => {
    const chunk = 'x'.repeat(8000);
    const argv = ['/bin/sh', ...Array.from({ length: 40 }, () => chunk)];
    const spec = specRunning(argv);
    expect(Buffer.byteLength(JSON.stringify(spec))).toBeGreaterThan(MAX_SPEC_BYTES);
    expect((await createRefused(spec)).code).toBe('PAYLOAD_TOO_LARGE');

    // The same through revise_proposal.
    const r = expectOk(
      await m.callTool<RevisionResult>(alice, 'create_proposal', {
        spec: validSpec(),
        idempotency_key: m.key(),
      }),
    );
    const mid = m.counts();
    expectError(
      await m.callTool(alice, 'revise_proposal', {
        proposal_id: r.proposal_id,
        spec,
        idempotency_key: m.key(),
      }),
      'PAYLOAD_TOO_LARGE',
    );
    expect(m.counts()).toEqual(mid);
  });

  it('a spec nested 200,000 arrays deep is INVALID_INPUT over REST and MCP, and the master stays up', async () => {
    const deep = `${'['.repeat(200_000)}${']'.repeat(200_000)}`;
    const headers = {
      authorization: `Bearer ${aliceToken}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    };
    const rest = await m.fetch(`${m.url}/api/v1/proposals`, {
      method: 'POST',
      headers: { ...headers, 'idempotency-key': 'deep-1' },
      body: `{"spec":${deep}}`,
    });
    expect(rest.status).toBe(400);
    const restBody = (await rest.json()) as { error: ErrorBody };
    expect(restBody.error).toMatchObject({ code: 'INVALID_INPUT' });
    expect(restBody.error.message).toMatch(/nested more than 64 levels/);

    const mcp = await m.fetch(`${m.url}/mcp`, {
      method: 'POST',
      headers,
      body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_proposal","arguments":{"spec":${deep},"idempotency_key":"deep-2"}}}`,
    });
    const text = await mcp.text();
    expect(text).toContain('INVALID_INPUT');
    expect(text).toMatch(/nested more than 64 levels/);
    expect(m.counts()).toEqual(before);
    // Still serving.
    expectOk(await m.callTool(alice, 'list_proposals', {}));
  });

  it('a REST body over the 1 MiB limit is 413 PAYLOAD_TOO_LARGE', async () => {
    const res = await m
      .rest(aliceToken)
      .post<{ error: ErrorBody }>('/api/v1/proposals', { spec: validSpec({ notes: 'y'.repeat(1_200_000) }) });
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('PAYLOAD_TOO_LARGE');
    expect(m.counts()).toEqual(before);
  });

  it('output paths that escape the output dir are refused', async () => {
    for (const path of [
      '../escape.txt',
      '/etc/passwd',
      'a/../../b',
      'results//x',
      '..',
      '\\windows',
      'a/./../..',
    ]) {
      const e = await createRefused(validSpec({ outputs: [{ path, required: true }] }));
      expect({ path, code: e.code }).toEqual({ path, code: 'INVALID_INPUT' });
      expect(e.message).toContain('outputs');
    }
  });
});

describe('policy: disallowed executables', () => {
  it('are saved as drafts with an error finding, and confirm is refused with POLICY_VIOLATION', async () => {
    for (const [argv0, code] of [
      [DISALLOWED_EXECUTABLE, 'EXECUTABLE_NOT_ALLOWED'],
      ['python3', 'EXECUTABLE_NOT_ABSOLUTE'],
      ['/bin/../usr/bin/curl', 'EXECUTABLE_NOT_ALLOWED'],
    ] as const) {
      const r = expectOk(
        await m.callTool<RevisionResult>(alice, 'create_proposal', {
          spec: specRunning([argv0, '-V']),
          idempotency_key: m.key(),
        }),
      );
      expect(r.confirmable).toBe(false);
      const finding = r.findings.find((f) => f.severity === 'error');
      expect(finding).toMatchObject({ code, path: 'runtime.argv[0]' });
      expect(finding?.hint.length).toBeGreaterThan(10);

      const afterCreate = m.counts();
      const e = expectError(
        await m.callTool(alice, 'confirm_revision', {
          proposal_id: r.proposal_id,
          revision_id: r.revision_id,
          idempotency_key: m.key(),
        }),
        'POLICY_VIOLATION',
      );
      expect(e.message).toContain(code);
      expect(m.counts()).toEqual(afterCreate);
      expect(m.store.proposals.get(r.proposal_id)?.state).toBe('DRAFT');
      expect(m.store.proposals.revision(r.revision_id)?.confirmed_at).toBeNull();
    }
  });
});

describe('tokens', () => {
  it('no token: the MCP client cannot connect and raw requests get 401 with WWW-Authenticate', async () => {
    await expect(m.mcpClient(null)).rejects.toThrow(/UNAUTHENTICATED/);
    const res = await m.rest(null).post<{ error: ErrorBody }>('/mcp', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/list',
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(res.body.error.code).toBe('UNAUTHENTICATED');
  });

  it('an unknown or malformed token is 401', async () => {
    await expect(m.mcpClient('gpb_not-a-real-token')).rejects.toThrow(/UNAUTHENTICATED/);
    const res = await m.rest(null).get('/api/v1/proposals', { authorization: 'Basic dXNlcjpwYXNz' });
    expect(res.status).toBe(401);
  });

  it('a revoked token stops working at once, also for a client connected before', async () => {
    const token = m.createToken('mallory', ['submitter']);
    const client = await m.mcpClient(token);
    expectOk(await m.callTool(client, 'list_proposals', {}));
    m.revokeToken('mallory');
    const mark = m.counts();
    await expect(
      m.callTool(client, 'create_proposal', { spec: validSpec(), idempotency_key: m.key() }),
    ).rejects.toThrow(/UNAUTHENTICATED/);
    await expect(m.mcpClient(token)).rejects.toThrow(/UNAUTHENTICATED/);
    expect((await m.rest(token).get('/api/v1/proposals')).status).toBe(401);
    expect(m.counts()).toEqual(mark);
  });
});
