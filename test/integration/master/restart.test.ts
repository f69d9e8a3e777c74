import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import type { ProposalView } from '../../../src/contracts/views.js';
import { createCaTrustingFetch } from '../../../src/platform/tls.js';
import { type ChildMaster, spawnCli, spawnMaster } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, connectMcpClient, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * Restarting the master loses nothing that was acknowledged (docs/architecture.md "Durability": reply only
 * after commit).
 */

const cleanup: Array<() => Promise<unknown>> = [];

afterAll(async () => {
  for (const fn of cleanup.reverse()) await fn().catch(() => undefined);
  removeTempDirs();
});

describe('restart on the same data dir', () => {
  it('keeps principals, proposals in every state, tasks, idempotency records, the audit chain and the CA', async () => {
    let m: TestMaster = await startTestMaster();
    cleanup.push(() => m.close());
    const aliceToken = m.createToken('alice', ['submitter']);
    const ritaToken = m.createToken('rita', ['reviewer']);
    const alice = await m.mcpClient(aliceToken);
    const rita = await m.mcpClient(ritaToken);

    const create = async (key: string) =>
      expectOk(
        await m.callTool<RevisionResult>(alice, 'create_proposal', {
          spec: validSpec(),
          idempotency_key: key,
        }),
      );
    const confirm = async (r: RevisionResult) =>
      expectOk(
        await m.callTool(alice, 'confirm_revision', {
          proposal_id: r.proposal_id,
          revision_id: r.revision_id,
          idempotency_key: m.key(),
        }),
      );
    const review = async (r: RevisionResult, decision: string) =>
      expectOk(
        await m.callTool(rita, 'submit_review', {
          proposal_id: r.proposal_id,
          revision_id: r.revision_id,
          decision,
          comments: 'checked',
          idempotency_key: m.key(),
        }),
      );

    const draft = await create('k-draft');
    const inReview = await create('k-review');
    await confirm(inReview);
    const changes = await create('k-changes');
    await confirm(changes);
    await review(changes, 'REQUEST_CHANGES');
    const approved = await create('k-approved');
    await confirm(approved);
    const decision = await review(approved, 'APPROVE');
    const ids = [draft, inReview, changes, approved].map((r) => r.proposal_id);

    const views = new Map<string, ProposalView>();
    for (const id of ids)
      views.set(
        id,
        expectOk(await m.callTool<{ proposal: ProposalView }>(alice, 'get_proposal', { proposal_id: id }))
          .proposal,
      );
    const counts = m.counts();
    const audit = m.store.audit.verify();
    const caPem = m.caPem;
    const url = m.url;

    m = await m.restart();
    expect(m.url).toBe(url);
    expect(m.caPem).toBe(caPem);
    expect(m.counts()).toEqual(counts);
    expect(m.store.audit.verify()).toEqual(audit);

    // The same tokens still work, and every proposal reads exactly as before.
    const alice2 = await m.mcpClient(aliceToken);
    for (const id of ids) {
      const v = expectOk(
        await m.callTool<{ proposal: ProposalView }>(alice2, 'get_proposal', { proposal_id: id }),
      );
      expect(v.proposal).toEqual(views.get(id));
    }
    expect(views.get(approved.proposal_id)?.state).toBe('APPROVED');
    const task = expectOk(
      await m.callTool<{ task: { state: string } }>(alice2, 'get_task', {
        task_id: (decision as { task_id: string }).task_id,
      }),
    );
    expect(task.task.state).toBe('QUEUED');

    // An acknowledged create replayed with its key returns the original answer, creating nothing.
    const replay = expectOk(
      await m.callTool<RevisionResult>(alice2, 'create_proposal', {
        spec: validSpec(),
        idempotency_key: 'k-draft',
      }),
    );
    expect(replay).toEqual(draft);
    expect(m.counts()).toEqual(counts);

    // The operator token from the first start still works.
    const op = await m.mcpClient(m.operatorToken);
    expectOk(await m.callTool(op, 'list_review_queue', {}));
  });
});

describe('SIGKILL of `gpu-broker serve`', () => {
  it('loses nothing that was acknowledged before the kill', async () => {
    const dataDir = makeTempDir('kill');
    let child: ChildMaster = await spawnMaster(dataDir);
    cleanup.push(() => child.stop('SIGKILL'));
    const operatorToken = readFileSync(child.operatorTokenFile, 'utf8').trim();
    const mkToken = async (name: string, role: string) => {
      const r = await spawnCli([
        'token',
        'create',
        '--data-dir',
        dataDir,
        '--name',
        name,
        '--role',
        role,
        '--json',
      ]);
      expect(r.code).toBe(0);
      return (JSON.parse(r.stdout) as { token: string }).token;
    };
    const aliceToken = await mkToken('alice', 'submitter');
    const ritaToken = await mkToken('rita', 'reviewer');
    const trusting = createCaTrustingFetch(readFileSync(child.caFile!, 'utf8'));
    cleanup.push(() => trusting.close());

    const alice = await connectMcpClient(child.url, aliceToken, trusting.fetch);
    const rita = await connectMcpClient(child.url, ritaToken, trusting.fetch);
    const acknowledged: RevisionResult[] = [];
    for (let i = 0; i < 20; i++) {
      acknowledged.push(
        expectOk(
          await callTool<RevisionResult>(alice, 'create_proposal', {
            spec: validSpec({ title: `run ${i}` }),
            idempotency_key: `kill-${i}`,
          }),
        ),
      );
    }
    const last = acknowledged[acknowledged.length - 1]!;
    expectOk(
      await callTool(alice, 'confirm_revision', {
        proposal_id: last.proposal_id,
        revision_id: last.revision_id,
        idempotency_key: 'kill-confirm',
      }),
    );
    const approval = expectOk(
      await callTool<{ task_id: string }>(rita, 'submit_review', {
        proposal_id: last.proposal_id,
        revision_id: last.revision_id,
        decision: 'APPROVE',
        comments: 'ok',
        idempotency_key: 'kill-approve',
      }),
    );
    await Promise.allSettled([alice.close(), rita.close()]);

    const exit = await child.stop('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');

    child = await spawnMaster(dataDir);
    const alice2 = await connectMcpClient(child.url, aliceToken, trusting.fetch);
    const listed = expectOk(
      await callTool<{ proposals: Array<{ proposal_id: string; state: string }> }>(alice2, 'list_proposals', {
        limit: 200,
      }),
    );
    expect(listed.proposals.map((p) => p.proposal_id).sort()).toEqual(
      acknowledged.map((r) => r.proposal_id).sort(),
    );
    const p = expectOk(
      await callTool<{ proposal: ProposalView }>(alice2, 'get_proposal', { proposal_id: last.proposal_id }),
    );
    expect(p.proposal).toMatchObject({ state: 'APPROVED', task_id: approval.task_id });
    const t = expectOk(
      await callTool<{ task: { state: string } }>(alice2, 'get_task', { task_id: approval.task_id }),
    );
    expect(t.task.state).toBe('QUEUED');
    const op = await connectMcpClient(child.url, operatorToken, trusting.fetch);
    expectOk(await callTool(op, 'list_review_queue', {}));
    await Promise.allSettled([alice2.close(), op.close()]);

    await child.stop('SIGTERM');
    const verify = await spawnCli(['audit', 'verify', '--data-dir', dataDir, '--json']);
    expect(verify.code).toBe(0);
    // 3 principals + 20 creates + confirm + task + approve.
    expect(JSON.parse(verify.stdout)).toMatchObject({ ok: true, events: 3 + 20 + 1 + 1 + 1 });
  });
});
