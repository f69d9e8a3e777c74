import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import { run as grant } from '../../../../src/cli/review/grant.js';
import { runCli } from '../../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../../support/master.js';
import { validSpec } from '../../../support/spec.js';

/** `gpu-broker grant …` against a real master over HTTPS (the REST mirror of the grant tools). */

let m: TestMaster;
let aliceToken: string;
let ritaToken: string;
const remote = (token: string) => ['--url', m.url, '--token', token, '--ca-file', m.caCertPath!];

/** A revision of alice's running `/bin/sh run.sh`, confirmed; approved by rita when asked. */
async function revision(cards = 1, approve = false): Promise<RevisionResult> {
  const api = m.rest(aliceToken);
  const up = (
    await api.post<{ inputs: unknown[] }>('/api/v1/inputs', {
      files: [{ path: 'run.sh', content: `echo ${cards}` }],
    })
  ).body;
  const spec = validSpec({
    runtime: { kind: 'process', argv: ['/bin/sh', 'run.sh'] },
    inputs: up.inputs as never,
    cards: { count: cards },
  });
  const r = (await api.post<RevisionResult>('/api/v1/proposals', { spec })).body;
  await api.post(`/api/v1/proposals/${r.proposal_id}/confirm`, { revision_id: r.revision_id });
  if (approve)
    await m.rest(ritaToken).post(`/api/v1/proposals/${r.proposal_id}/reviews`, {
      revision_id: r.revision_id,
      decision: 'APPROVE',
      comments: 'ok',
    });
  return r;
}

beforeAll(async () => {
  m = await startTestMaster({
    config: { policy: { scripts: [{ interpreter: '/bin/sh', script_from_inputs: true }] } },
  });
  aliceToken = m.createToken('alice', ['submitter', 'reviewer']);
  ritaToken = m.createToken('rita', ['reviewer']);
});

afterAll(async () => {
  await m?.close();
});

describe('grant', () => {
  it('request, a refused self-approval, approve, explain with the failing clause, list, revoke', async () => {
    const base = await revision(1, true);
    const req = await runCli(grant, [
      'request',
      '--base',
      base.revision_id,
      '--mutable',
      'run.sh',
      '--reason',
      'iterate',
      ...remote(aliceToken),
      '--json',
    ]);
    expect(req.code).toBe(0);
    const id = (JSON.parse(req.stdout) as { grant: { grant_id: string; state: string } }).grant.grant_id;
    const self = await runCli(grant, ['approve', id, ...remote(aliceToken), '--json']);
    expect(self.code).not.toBe(0);
    expect(self.stdout + self.stderr).toContain('SELF_GRANT_FORBIDDEN');
    const ok = await runCli(grant, ['approve', id, '--comment', 'run.sh only', ...remote(ritaToken)]);
    expect(ok.stdout).toContain(`${id} ACTIVE`);

    const wide = await revision(2);
    const explained = await runCli(grant, ['explain', '--revision', wide.revision_id, ...remote(aliceToken)]);
    expect(explained.code).toBe(1);
    expect(explained.stdout).toContain('not covered: cards: cards 2 > 1');

    const list = await runCli(grant, ['list', '--state', 'ACTIVE', ...remote(ritaToken)]);
    expect(list.stdout, list.stderr).toContain(id);
    const revoked = await runCli(grant, ['revoke', id, '--cancel-running', ...remote(ritaToken)]);
    expect(revoked.stdout).toContain(`${id} REVOKED`);
    const show = await runCli(grant, ['show', id, ...remote(aliceToken), '--json']);
    expect(JSON.parse(show.stdout)).toMatchObject({ grant: { state: 'REVOKED' } });
  });

  it('refuses a missing subcommand or grant id with a usage error', async () => {
    expect((await runCli(grant, [])).code).toBe(2);
    expect((await runCli(grant, ['show', ...remote(ritaToken)])).stderr).toContain('which grant');
  });
});
