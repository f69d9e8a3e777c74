import { afterAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import { openDb } from '../../../src/store/db.js';
import { spawnCli } from '../../support/cli.js';
import { closeAllTestMasters, startTestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/** `/healthz` answers anonymously and reports the audit chain; a broken chain makes it 503. */

interface Health {
  status: string;
  audit: { ok: boolean; events?: number; detail?: string; first_bad_seq?: number };
}

afterAll(async () => {
  await closeAllTestMasters();
});

describe('/healthz', () => {
  it('answers without a token and reports an intact audit chain', async () => {
    const m = await startTestMaster();
    const c = await m.mcpClient(m.createToken('alice', ['submitter']));
    expectOk(await m.callTool(c, 'create_proposal', { spec: validSpec(), idempotency_key: m.key() }));
    // /healthz answers from the background monitor's last pass; run one now rather than wait for it.
    await m.master.audit.checkNew();
    const res = await m.rest(null).get<Health>('/healthz');
    expect(res.status).toBe(200);
    // operator + alice principals, one proposal.
    expect(res.body).toEqual(expect.objectContaining({ status: 'ok', audit: { ok: true, events: 3 } }));
    // Nothing about proposals or principals leaks to anonymous callers.
    expect(JSON.stringify(res.body)).not.toContain('alice');
    await m.close();
  });

  it('is 503 and names the first bad row once the chain was tampered with; audit verify exits 1', async () => {
    const m = await startTestMaster();
    const c = await m.mcpClient(m.createToken('alice', ['submitter']));
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push(
        expectOk(
          await m.callTool<RevisionResult>(c, 'create_proposal', {
            spec: validSpec(),
            idempotency_key: m.key(),
          }),
        ).proposal_id,
      );

    // A second connection, as an intruder with file access would have.
    const db = openDb(`${m.dataDir}/broker.db`);
    try {
      // The append-only triggers stop a plain edit…
      expect(() => db.prepare("UPDATE audit_events SET actor = 'eve' WHERE seq = 4").run()).toThrow(
        /append-only/,
      );
      expect(() => db.prepare('DELETE FROM audit_events WHERE seq = 4').run()).toThrow(/append-only/);
      // …so the intruder drops one first and rewrites history at seq 4 (the first proposal).
      db.exec('DROP TRIGGER audit_events_append_only_update');
      db.prepare("UPDATE audit_events SET actor = 'eve' WHERE seq = 4").run();
    } finally {
      db.close();
    }

    // A row verified before is only re-read by a full pass (scheduled, or on demand as here).
    await m.master.audit.verifyAll();
    const res = await m.rest(null).get<Health>('/healthz');
    expect(res.status).toBe(503);
    expect(res.body.status).toBe('degraded');
    expect(res.body.audit.ok).toBe(false);
    // It names the first bad row (seq 4), whichever field carries it.
    expect(JSON.stringify(res.body.audit)).toMatch(/"first_bad_seq":4\b|seq 4\b/);
    await m.close({ keepDataDir: true });

    const verify = await spawnCli(['audit', 'verify', '--data-dir', m.dataDir]);
    expect(verify.code).toBe(1);
    expect(verify.stdout).toContain('BROKEN at seq 4');
    const json = await spawnCli(['audit', 'verify', '--data-dir', m.dataDir, '--json']);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toMatchObject({ ok: false, first_bad_seq: 4, events: 4 });
  });
});
