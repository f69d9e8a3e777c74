import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import type { ErrorBody } from '../../../src/contracts/errors.js';
import type { ProposalView } from '../../../src/contracts/views.js';
import { REST_ROUTES } from '../../../src/http/rest.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/** REST mirrors the tools under /api/v1 with the same schemas, tokens, results and error codes. */

let m: TestMaster;
let aliceToken: string;
let ritaToken: string;

/** A route's URL with every `:param` filled (numeric ones with 0). */
function concrete(url: string): string {
  return url.replace(/:([a-z_]+)/g, (_, name: string) => (name === 'index' ? '0' : `x_${name}`));
}

beforeAll(async () => {
  m = await startTestMaster();
  aliceToken = m.createToken('alice', ['submitter']);
  ritaToken = m.createToken('rita', ['reviewer']);
});

afterAll(async () => {
  await m?.close();
});

describe('authentication on every /api/v1 route', () => {
  it('answers 401 UNAUTHENTICATED without a token, with a revoked token and with a garbage one', async () => {
    const revoked = m.createToken('gone', ['submitter']);
    m.revokeToken('gone');
    const before = m.counts();
    expect(REST_ROUTES.length).toBeGreaterThan(10);
    for (const route of REST_ROUTES) {
      for (const token of [null, revoked, 'gpb_garbage']) {
        const api = m.rest(token);
        const res =
          route.method === 'GET'
            ? await api.get<{ error: ErrorBody }>(concrete(route.url))
            : await api.post<{ error: ErrorBody }>(concrete(route.url), {});
        expect({ route: `${route.method} ${route.url}`, status: res.status }).toEqual({
          route: `${route.method} ${route.url}`,
          status: 401,
        });
        expect(res.body.error.code).toBe('UNAUTHENTICATED');
        expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
      }
    }
    expect(m.counts()).toEqual(before);
  });

  it('path tricks around the public paths never reach a protected route without a token', async () => {
    const port = new URL(m.url).port;
    const { request } = await import('node:https');
    for (const path of [
      '/assets/../api/v1/proposals',
      '/assets/%2e%2e/api/v1/proposals',
      '/healthz/../api/v1/proposals',
      '/favicon.ico/../api/v1/cards',
      '/assets/x/..%2f..%2fapi/v1/proposals',
      '/healthz;/../api/v1/cards',
      '//api/v1/proposals',
      '/%61pi/v1/proposals',
    ]) {
      // A raw request: fetch would normalise the dot segments before sending.
      const status = await new Promise<number>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port, path, method: 'GET', ca: m.caPem! }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', reject);
        req.end();
      });
      expect({ path, refused: status === 401 || status === 404 }).toEqual({ path, refused: true });
    }
  });

  it('refuses worker tokens on people’s routes with 403', async () => {
    const worker = m.createToken('gpu-host-1', ['worker'], 'gpu-host-1');
    const res = await m.rest(worker).get<{ error: ErrorBody }>('/api/v1/proposals');
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('FORBIDDEN');
    const mcp = await m.rest(worker).post('/mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect(mcp.status).toBe(403);
  });
});

describe('REST and MCP agree', () => {
  it('a proposal created over REST reads the same over MCP and REST, and review works over REST', async () => {
    const alice = m.rest(aliceToken);
    const created = await alice.post<RevisionResult>('/api/v1/proposals', { spec: validSpec() });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ state: 'DRAFT', revision_number: 1, confirmable: true });
    const pid = created.body.proposal_id;

    const viaRest = await alice.get<{ proposal: ProposalView }>(`/api/v1/proposals/${pid}`);
    const mcpAlice = await m.mcpClient(aliceToken);
    const viaMcp = expectOk(
      await m.callTool<{ proposal: ProposalView }>(mcpAlice, 'get_proposal', { proposal_id: pid }),
    );
    expect(viaRest.status).toBe(200);
    expect(viaRest.body).toEqual(viaMcp);

    const confirmed = await alice.post(`/api/v1/proposals/${pid}/confirm`, {
      revision_id: created.body.revision_id,
    });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body['state']).toBe('IN_REVIEW');

    // The same refusal, with the same code, on both edges.
    const restForbidden = await alice.get<{ error: ErrorBody }>('/api/v1/review-queue');
    expect(restForbidden.status).toBe(403);
    const mcpForbidden = expectError(await m.callTool(mcpAlice, 'list_review_queue', {}), 'FORBIDDEN');
    expect(restForbidden.body.error).toEqual(mcpForbidden);

    const rita = m.rest(ritaToken);
    const queue = await rita.get<{ items: Array<{ proposal_id: string }> }>('/api/v1/review-queue?limit=10');
    expect(queue.status).toBe(200);
    expect(queue.body.items.map((i) => i.proposal_id)).toContain(pid);
    const approved = await rita.post<{ state: string; task_id: string }>(`/api/v1/proposals/${pid}/reviews`, {
      revision_id: created.body.revision_id,
      decision: 'APPROVE',
      comments: 'fine',
    });
    expect(approved.status).toBe(200);
    expect(approved.body.state).toBe('APPROVED');
    const task = await alice.get<{ task: { state: string } }>(`/api/v1/tasks/${approved.body.task_id}`);
    expect(task.status).toBe(200);
    expect(task.body.task.state).toBe('QUEUED');

    // Wait over REST: query-string numbers are converted, and the decided proposal returns at once.
    const waited = await alice.get<{ timed_out: boolean }>(`/api/v1/proposals/${pid}/wait?timeout_seconds=1`);
    expect(waited.status).toBe(200);
    expect(waited.body.timed_out).toBe(false);
  });

  it('maps broker errors to the status table and malformed bodies to 400', async () => {
    const alice = m.rest(aliceToken);
    const before = m.counts();
    const missing = await alice.get<{ error: ErrorBody }>(`/api/v1/proposals/prop_${'0'.repeat(26)}`);
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('NOT_FOUND');
    const unknownField = await alice.post<{ error: ErrorBody }>('/api/v1/proposals', {
      spec: validSpec(),
      x: 1,
    });
    expect(unknownField.status).toBe(400);
    expect(unknownField.body.error.code).toBe('INVALID_INPUT');
    const notJson = await alice.request<{ error: ErrorBody }>('POST', '/api/v1/proposals', {
      body: '{"spec": ',
      headers: { 'content-type': 'application/json', 'idempotency-key': m.key() },
    });
    expect(notJson.status).toBe(400);
    expect(notJson.body.error.code).toBe('INVALID_INPUT');
    const array = await alice.request<{ error: ErrorBody }>('POST', '/api/v1/proposals', {
      body: '[]',
      headers: { 'content-type': 'application/json', 'idempotency-key': m.key() },
    });
    expect(array.status).toBe(400);
    const noRoute = await alice.get<{ error: ErrorBody }>('/api/v1/nothing-here');
    expect(noRoute.status).toBe(404);
    expect(m.counts()).toEqual(before);
  });
});
