import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/**
 * ADR 0016: the master's disk. A fake disk (injected statfs) drives the free-space guard through
 * a real master: under `warn_free_bytes` a `disk_low` warning; under `min_free_bytes` every mutating
 * tool and REST call that makes the store grow answers a typed, retryable UNAVAILABLE (nothing changes),
 * `/healthz` answers 503 with the reason and the alert is `disk_full`; reads and cancels still work; once
 * space returns, everything works again. A real SQLITE_FULL (a `max_page_count` the store reaches) maps
 * to the same UNAVAILABLE and flips the store to `unwritable` until a probe write succeeds.
 */

const GiB = 1024 * 1024 * 1024;
const MiB = 1024 * 1024;

interface Health {
  status: string;
  storage: { ok: boolean; state: string; free_bytes: number | null; detail?: string };
}
interface Alert {
  kind: string;
  severity: string;
  message: string;
}

let free = 10 * GiB;
let m: TestMaster;
let alice: Client;
let op: Client;

beforeAll(async () => {
  m = await startTestMaster({
    config: {
      storage: { warn_free_bytes: GiB, min_free_bytes: 256 * MiB, check_interval_ms: 3_600_000 },
    },
    statfs: async () => ({ free_bytes: free, total_bytes: 20 * GiB }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  op = await m.mcpClient(m.operatorToken);
});

afterAll(async () => {
  await m?.close();
});

async function disk(bytes: number): Promise<void> {
  free = bytes;
  await m.master.storage.check();
}

async function health() {
  return m.rest(null).get<Health>('/healthz');
}

async function alerts(): Promise<Alert[]> {
  return expectOk(await callTool<{ alerts: Alert[] }>(op, 'get_status')).alerts;
}

function propose(key = m.key()) {
  return callTool<{ proposal_id: string }>(alice, 'create_proposal', {
    spec: validSpec(),
    idempotency_key: key,
  });
}

describe('the free-space guard', () => {
  it('says ok with room to spare', async () => {
    const res = await health();
    expect(res.status).toBe(200);
    expect(res.body.storage).toMatchObject({ ok: true, state: 'ok', free_bytes: 10 * GiB });
    expect((await alerts()).map((a) => a.kind)).not.toContain('disk_low');
  });

  it('warns under warn_free_bytes but still takes writes', async () => {
    await disk(512 * MiB);
    expect(await alerts()).toContainEqual(expect.objectContaining({ kind: 'disk_low', severity: 'warning' }));
    const res = await health();
    expect(res.status).toBe(200);
    expect(res.body.storage).toMatchObject({ ok: true, state: 'low' });
    expectOk(await propose());
  });

  it('refuses growth under min_free_bytes with a retryable UNAVAILABLE, changing nothing', async () => {
    const kept = expectOk(await propose());
    const bob = m.rest(m.createToken('bob', ['submitter']));
    await disk(100 * MiB);
    const before = m.counts();
    const refused = expectError(await propose(), 'UNAVAILABLE');
    expect(refused.retryable).toBe(true);
    expect(refused.message).toMatch(/create_proposal refused: 100 MiB free/);
    const rest = await bob.post('/api/v1/proposals', { spec: validSpec() });
    expect(rest.status).toBe(503);
    expect(rest.body).toMatchObject({ error: { code: 'UNAVAILABLE', retryable: true } });
    const res = await health();
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ status: 'degraded', storage: { ok: false, state: 'refusing' } });
    expect(res.body.storage.detail).toMatch(/under storage\.min_free_bytes/);
    expect(await alerts()).toContainEqual(
      expect.objectContaining({ kind: 'disk_full', severity: 'critical' }),
    );
    const metrics = await m.fetch(`${m.url}/metrics`, {
      headers: { Authorization: `Bearer ${m.operatorToken}` },
    });
    const text = await metrics.text();
    expect(text).toMatch(/^gpu_broker_storage_accepts_writes 0$/m);
    expect(text).toMatch(new RegExp(`^gpu_broker_storage_free_bytes ${100 * MiB}$`, 'm'));
    // Reads still answer; a cancel (it stops growth) still goes through.
    expectOk(await callTool(alice, 'list_proposals'));
    expectOk(
      await callTool(alice, 'cancel_proposal', { proposal_id: kept.proposal_id, idempotency_key: m.key() }),
    );
    const after = m.counts();
    // Only the cancel wrote (its audit row and idempotency key); nothing of the refused calls.
    expect({ ...after, audit_events: 0, idempotency_keys: 0 }).toEqual({
      ...before,
      audit_events: 0,
      idempotency_keys: 0,
    });
    expect(after.idempotency_keys).toBe(before.idempotency_keys + 1);
  });

  it('still answers the replay of a call that succeeded before the disk filled', async () => {
    await disk(10 * GiB);
    const key = m.key();
    const first = expectOk(await propose(key));
    await disk(100 * MiB);
    expect(expectOk(await propose(key))).toEqual(first);
  });

  it('takes writes again once space returns, and the retried call succeeds', async () => {
    const key = m.key();
    expectError(await propose(key), 'UNAVAILABLE');
    await disk(10 * GiB);
    expect((await health()).status).toBe(200);
    expectOk(await propose(key));
    expect((await alerts()).map((a) => a.kind)).not.toContain('disk_full');
  });
});

describe('a real SQLITE_FULL', () => {
  it('answers UNAVAILABLE (not INTERNAL), turns /healthz 503 until a probe write succeeds', async () => {
    const db = m.store.db;
    const pages = db.pragma('page_count', { simple: true }) as number;
    db.pragma(`max_page_count = ${pages}`);
    try {
      // Specs with long notes need new pages the limit refuses (once free pages are used up).
      const big = validSpec({ notes: 'x'.repeat(60_000) });
      let out = await callTool(alice, 'create_proposal', { spec: big, idempotency_key: m.key() });
      for (let i = 0; i < 50 && out.ok; i++)
        out = await callTool(alice, 'create_proposal', { spec: big, idempotency_key: m.key() });
      const err = expectError(out, 'UNAVAILABLE');
      expect(err.retryable).toBe(true);
      expect(err.message).toMatch(/SQLITE_FULL/);
      const res = await health();
      expect(res.status).toBe(503);
      expect(res.body.storage).toMatchObject({ ok: false, state: 'unwritable' });
      expect(await alerts()).toContainEqual(expect.objectContaining({ kind: 'disk_full' }));
      // While unwritable, growth is refused up front.
      expectError(await propose(), 'UNAVAILABLE');
    } finally {
      db.pragma('max_page_count = 1073741823');
    }
    await m.master.storage.check();
    expect((await health()).status).toBe(200);
    expectOk(await propose());
  });
});
