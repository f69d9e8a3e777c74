import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import type { ErrorBody } from '../../../src/contracts/errors.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/**
 * Every mutating tool takes an idempotency key: a replay with the same body returns the original
 * result, the same key with another body is IDEMPOTENCY_CONFLICT (docs/mcp-tools.md "Idempotency").
 */

let m: TestMaster;
let aliceToken: string;

beforeAll(async () => {
  // 200 calls of one principal at once: over the per-principal caps (docs/security.md "Fair share between principals") by design, opened here.
  m = await startTestMaster({
    config: {
      http: { max_connections_per_principal: 1024, max_connections_per_peer: 2048 },
      quotas: { heavy_calls_per_principal: 64, heavy_queued_per_principal: 1024, heavy_ms_per_second: 1000 },
    },
  });
  aliceToken = m.createToken('alice', ['submitter']);
});

afterAll(async () => {
  await m?.close();
});

describe('idempotency keys', () => {
  it('200 concurrent create_proposal calls with one key yield exactly one proposal', async () => {
    // Eight SDK clients (eight connection pools) firing 25 calls each, all at once.
    const clients = await Promise.all(Array.from({ length: 8 }, () => m.mcpClient(aliceToken)));
    const before = m.counts();
    const key = m.key();
    const spec = validSpec({ title: 'one of two hundred' });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        m.callTool<RevisionResult>(clients[i % clients.length]!, 'create_proposal', {
          spec,
          idempotency_key: key,
        }),
      ),
    );
    const ok = results.map(expectOk);
    expect(new Set(ok.map((r) => r.proposal_id)).size).toBe(1);
    expect(new Set(ok.map((r) => r.revision_id)).size).toBe(1);
    expect(new Set(ok.map((r) => JSON.stringify(r))).size).toBe(1);

    const after = m.counts();
    expect(after.proposals - before.proposals).toBe(1);
    expect(after.revisions - before.revisions).toBe(1);
    expect(after.idempotency_keys - before.idempotency_keys).toBe(1);
    expect(after.audit_events - before.audit_events).toBe(1);

    // The same key with a different body is a conflict and changes nothing.
    const conflict = expectError(
      await m.callTool(clients[0]!, 'create_proposal', {
        spec: validSpec({ title: 'something else' }),
        idempotency_key: key,
      }),
      'IDEMPOTENCY_CONFLICT',
    );
    expect(conflict.retryable).toBe(false);
    expect(m.counts()).toEqual(after);
  });

  it('a replay returns the original result even after the state moved on', async () => {
    const c = await m.mcpClient(aliceToken);
    const created = expectOk(
      await m.callTool<RevisionResult>(c, 'create_proposal', {
        spec: validSpec(),
        idempotency_key: 'create-1',
      }),
    );
    const confirmKey = m.key();
    const args = {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      idempotency_key: confirmKey,
    };
    const first = expectOk(await m.callTool(c, 'confirm_revision', args));
    const mark = m.counts();
    // Confirming again would be INVALID_STATE; the replay instead returns the stored first answer.
    expect(expectOk(await m.callTool(c, 'confirm_revision', args))).toEqual(first);
    expectError(
      await m.callTool(c, 'confirm_revision', { ...args, idempotency_key: m.key() }),
      'INVALID_STATE',
    );
    expect(m.counts()).toEqual(mark);
  });

  it('keys are scoped per principal and per operation', async () => {
    const alice = await m.mcpClient(aliceToken);
    const bob = await m.mcpClient(m.createToken('bob', ['submitter']));
    const key = 'shared-key';
    const a = expectOk(
      await m.callTool<RevisionResult>(alice, 'create_proposal', { spec: validSpec(), idempotency_key: key }),
    );
    const b = expectOk(
      await m.callTool<RevisionResult>(bob, 'create_proposal', { spec: validSpec(), idempotency_key: key }),
    );
    expect(b.proposal_id).not.toBe(a.proposal_id);
    // The same key on another operation of the same principal is independent too.
    const cancelled = expectOk(
      await m.callTool<{ state: string }>(alice, 'cancel_proposal', {
        proposal_id: a.proposal_id,
        idempotency_key: key,
      }),
    );
    expect(cancelled.state).toBe('CANCELLED');
  });

  it('REST honours the Idempotency-Key header the same way', async () => {
    const api = m.rest(aliceToken);
    const before = m.counts();
    const body = { spec: validSpec({ title: 'via REST' }) };
    const first = await api.post<RevisionResult>('/api/v1/proposals', body, { idempotencyKey: 'rest-1' });
    const again = await api.post<RevisionResult>('/api/v1/proposals', body, { idempotencyKey: 'rest-1' });
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    const conflict = await api.post<{ error: ErrorBody }>(
      '/api/v1/proposals',
      { spec: validSpec({ title: 'other' }) },
      { idempotencyKey: 'rest-1' },
    );
    expect(conflict.status).toBe(409);
    expect(conflict.body.error.code).toBe('IDEMPOTENCY_CONFLICT');
    const missing = await api.post<{ error: ErrorBody }>('/api/v1/proposals', body, { idempotencyKey: null });
    expect(missing.status).toBe(400);
    expect(missing.body.error.code).toBe('INVALID_INPUT');
    expect(m.counts().proposals - before.proposals).toBe(1);
  });
});
