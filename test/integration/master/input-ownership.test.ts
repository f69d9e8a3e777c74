import { createHash } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import { run as auditCli } from '../../../src/cli/operator/audit.js';
import { runCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import type { UploadResult } from '../../support/proposals.js';
import { validSpec } from '../../support/spec.js';

/**
 * docs/security.md "Code the reviewer did not read" ("another tenant's code by digest"), through a real master, a real MCP client and
 * REST: bob knows the sha256 of alice's file. He can neither read it (get_input on his own revision,
 * the REST mirror, the reviewer's diff), nor name it in a spec that could run, nor learn from any
 * finding, upload answer or error whether the store holds it or how large it is. Alice's own flow
 * still works, and both uploading the same bytes each get to use them. Every upload leaves an audit
 * row (item 10) and the chain still verifies.
 */

const SECRET = 'print("alice\'s private training code")\n';
const sha = (b: string | Buffer) => createHash('sha256').update(b).digest('hex');

type Upload = UploadResult;
type Revision = RevisionResult;

let m: TestMaster;
let alice: Client;
let bob: Client;
let rita: Client;
let aliceToken: string;
let bobToken: string;
let k = 0;
const key = () => `own-${process.pid}-${++k}`;

/** A spec whose one input is `entry`, run by /bin/sh. */
const specWith = (inputs: Upload['inputs']) =>
  validSpec({ title: 'ownership', runtime: { kind: 'process', argv: ['/bin/sh', '-c', 'true'] }, inputs });

/** The same findings with every digest replaced, so two answers compare by their words alone. */
const shape = (r: Revision) =>
  r.findings.map((f) => JSON.stringify(f).replace(/[0-9a-f]{64}/g, '<sha>')).sort();

const put = (token: string, body: Buffer | string) =>
  m.fetch(`${m.url}/api/v1/blobs/${sha(body)}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream' },
    body: typeof body === 'string' ? Buffer.from(body) : body,
  });

beforeAll(async () => {
  m = await startTestMaster();
  aliceToken = m.createToken('alice', ['submitter']);
  bobToken = m.createToken('bob', ['submitter']);
  alice = await m.mcpClient(aliceToken);
  bob = await m.mcpClient(bobToken);
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
}, 60_000);

afterAll(async () => {
  await m?.close();
});

describe('a second submitter and the first one’s blob', () => {
  let secret: Upload['inputs'][number];

  it('alice uploads her file; it is new for her', async () => {
    const up = expectOk(
      await callTool<Upload>(alice, 'upload_inputs', {
        files: [{ path: 'train.py', content: SECRET }],
        idempotency_key: key(),
      }),
    );
    secret = up.inputs[0]!;
    expect(secret).toEqual({ path: 'train.py', sha256: sha(SECRET), size: Buffer.byteLength(SECRET) });
    expect(up.stored_bytes).toBe(secret.size);
  });

  it('bob naming her digest gets the same INPUT_UNKNOWN as for bytes no one stored, whatever size he claims', async () => {
    const never = 'x'.repeat(secret.size);
    const unknown = { path: 'train.py', sha256: sha(never), size: secret.size };
    const theirs = (size: number) => ({ path: 'train.py', sha256: secret.sha256, size });
    const asBob = async (inputs: Upload['inputs']) =>
      expectOk(
        await callTool<Revision>(bob, 'create_proposal', { spec: specWith(inputs), idempotency_key: key() }),
      );
    const right = await asBob([theirs(secret.size)]);
    const wrong = await asBob([theirs(secret.size + 1)]);
    const baseline = await asBob([unknown]);
    const baselineWrong = await asBob([{ ...unknown, size: secret.size + 1 }]);
    for (const r of [right, wrong]) {
      expect(r.confirmable).toBe(false);
      expect(r.findings.filter((f) => f.severity === 'error').map((f) => f.code)).toEqual(['INPUT_UNKNOWN']);
      expect(JSON.stringify(r)).not.toContain(`"size":${secret.size}`); // no size from the store
    }
    // Word for word what a digest nobody uploaded gets: nothing tells "stored" from "not stored".
    expect(shape(right)).toEqual(shape(baseline));
    expect(shape(wrong)).toEqual(shape(baselineWrong));
    // …so the revision can never go to review.
    const refused = expectError(
      await callTool(bob, 'confirm_revision', {
        proposal_id: right.proposal_id,
        revision_id: right.revision_id,
        idempotency_key: key(),
      }),
      'POLICY_VIOLATION',
    );
    expect(JSON.stringify(refused)).not.toContain(SECRET.trim());
  });

  it('bob cannot read it with get_input on his own draft, over MCP or REST; the error matches a missing blob', async () => {
    const never = 'y'.repeat(secret.size);
    const draft = expectOk(
      await callTool<Revision>(bob, 'create_proposal', {
        spec: specWith([
          { path: 'train.py', sha256: secret.sha256, size: secret.size },
          { path: 'ghost.py', sha256: sha(never), size: secret.size },
        ]),
        idempotency_key: key(),
      }),
    );
    const read = (client: Client, path: string) =>
      callTool(client, 'get_input', { proposal_id: draft.proposal_id, revision_id: draft.revision_id, path });
    const stolen = expectError(await read(bob, 'train.py'), 'NOT_FOUND');
    const missing = expectError(await read(bob, 'ghost.py'), 'NOT_FOUND');
    const words = (e: object) => JSON.stringify(e).replace(/[0-9a-f]{64}/g, '<sha>');
    expect(words(stolen)).toEqual(words(missing));
    expect(JSON.stringify(stolen)).not.toContain(SECRET.trim());
    // A reviewer reading bob's draft fares no better: the revision names nothing bob may serve.
    expectError(await read(rita, 'train.py'), 'NOT_FOUND');
    const rest = await m
      .rest(bobToken)
      .get(
        `/api/v1/proposals/${draft.proposal_id}/revisions/${draft.revision_id}/input?path=${encodeURIComponent('train.py')}`,
      );
    expect(rest.status).toBe(404);
    expect(JSON.stringify(rest.body)).not.toContain(SECRET.trim());
    // A revision the proposal does not have is named as such, not as a missing input.
    const noRevision = expectError(
      await callTool(bob, 'get_input', {
        proposal_id: draft.proposal_id,
        revision_id: '01JZZZZZZZZZZZZZZZZZZZZZZZ',
        path: 'train.py',
      }),
      'NOT_FOUND',
    );
    expect(JSON.stringify(noRevision)).toContain(
      `proposal ${draft.proposal_id} has no revision 01JZZZZZZZZZZZZZZZZZZZZZZZ`,
    );
    expect(JSON.stringify(noRevision)).toContain('get_proposal lists the revisions');
  });

  it('bob cannot see it through the reviewer’s diff either', async () => {
    // Revision 1: bob's own harmless file at train.py; revision 2 swaps in alice's digest.
    const own = expectOk(
      await callTool<Upload>(bob, 'upload_inputs', {
        files: [{ path: 'train.py', content: 'print("bob")\n' }],
        idempotency_key: key(),
      }),
    ).inputs;
    const r1 = expectOk(
      await callTool<Revision>(bob, 'create_proposal', { spec: specWith(own), idempotency_key: key() }),
    );
    const r2 = expectOk(
      await callTool<Revision>(bob, 'revise_proposal', {
        proposal_id: r1.proposal_id,
        spec: specWith([{ path: 'train.py', sha256: secret.sha256, size: secret.size }]),
        idempotency_key: key(),
      }),
    );
    const view = expectOk(
      await callTool(rita, 'get_revision', { proposal_id: r1.proposal_id, revision_id: r2.revision_id }),
    );
    expect(JSON.stringify(view)).not.toContain('alice');
    expect(JSON.stringify(view)).not.toContain(SECRET.trim());
  });

  it('bob uploading the same bytes himself: new for him (PUT and upload_inputs), then usable', async () => {
    const first = await put(bobToken, SECRET);
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ sha256: secret.sha256, size: secret.size, stored: true });
    const second = await put(bobToken, SECRET);
    expect(await second.json()).toEqual({ sha256: secret.sha256, size: secret.size, stored: false });
    // Carol's first upload_inputs of the bytes is new for her too, and charged to her quota.
    const carol = await m.mcpClient(m.createToken('carol', ['submitter']));
    const up = expectOk(
      await callTool<Upload>(carol, 'upload_inputs', {
        files: [{ path: 'copy.py', content: SECRET }],
        idempotency_key: key(),
      }),
    );
    expect(up.stored_bytes).toBe(secret.size);
    expect(up.quota.used_bytes).toBe(secret.size);

    const r = expectOk(
      await callTool<Revision>(bob, 'create_proposal', { spec: specWith([secret]), idempotency_key: key() }),
    );
    expect(r.confirmable).toBe(true);
    const read = expectOk(
      await callTool<{ content: string }>(bob, 'get_input', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        path: 'train.py',
      }),
    );
    expect(read.content).toBe(SECRET);
  });

  it('alice’s own flow still works: propose, confirm, the reviewer reads and approves', async () => {
    const r = expectOk(
      await callTool<Revision>(alice, 'create_proposal', {
        spec: specWith([secret]),
        idempotency_key: key(),
      }),
    );
    expect(r.confirmable).toBe(true);
    expectOk(
      await callTool(alice, 'confirm_revision', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        idempotency_key: key(),
      }),
    );
    const read = expectOk(
      await callTool<{ content: string }>(rita, 'get_input', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        path: 'train.py',
      }),
    );
    expect(read.content).toBe(SECRET);
    const approved = expectOk(
      await callTool<{ task_id: string | null }>(rita, 'submit_review', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        revision_digest: r.digest,
        decision: 'APPROVE',
        comments: 'read every byte of train.py',
        idempotency_key: key(),
      }),
    );
    expect(approved.task_id).toMatch(/^task_/);
  });
});

describe('the audit trail of uploads', () => {
  it('has one row per uploaded blob per principal per call, saying whether it was new for them', async () => {
    const rows = m.store.db
      .prepare(
        "SELECT actor, subject_id, data FROM audit_events WHERE action = 'input.uploaded' ORDER BY seq",
      )
      .all() as Array<{ actor: string; subject_id: string; data: string }>;
    const of = (actor: string) =>
      rows
        .filter((r) => r.actor === actor && r.subject_id === sha(SECRET))
        .map((r) => JSON.parse(r.data) as { size: number; new: boolean; principal_id: string });
    expect(of('alice').map((d) => [d.size, d.new])).toEqual([[Buffer.byteLength(SECRET), true]]);
    expect(of('bob').map((d) => d.new)).toEqual([true, false]);
    expect(of('carol').map((d) => d.new)).toEqual([true]);

    // The same content twice in one call is one blob: one row.
    const before = rows.length;
    expectOk(
      await callTool(alice, 'upload_inputs', {
        files: [
          { path: 'a.txt', content: 'twice\n' },
          { path: 'b.txt', content: 'twice\n' },
        ],
        idempotency_key: key(),
      }),
    );
    const after = m.store.db
      .prepare("SELECT count(*) AS n FROM audit_events WHERE action = 'input.uploaded'")
      .get() as { n: number };
    expect(after.n).toBe(before + 1);
  });

  it('leaves a chain that `gpu-broker audit verify` accepts', async () => {
    expect(m.store.audit.verify()).toMatchObject({ ok: true });
    await m.close({ keepDataDir: true });
    const v = await runCli(auditCli, ['verify', '--data-dir', m.dataDir, '--json']);
    expect(v.code).toBe(0);
    expect(v.json()).toMatchObject({ ok: true });
  });
});
