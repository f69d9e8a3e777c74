import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/**
 * Who may do what (docs/security.md): tools/list per role, FORBIDDEN for other tools, no self-review whatever
 * the roles, STALE_REVISION for superseded revisions, and NOT_FOUND (never a hint of existence) for
 * another submitter's proposal.
 */

let m: TestMaster;
let alice: Client;
let bob: Client;
let rita: Client;
let operator: Client;

const REVIEWER_ONLY = ['list_review_queue', 'get_revision', 'submit_review'];
const SUBMITTER_TOOLS = [
  'create_proposal',
  'revise_proposal',
  'confirm_revision',
  'get_proposal',
  'list_proposals',
  'wait_for_proposal',
  'cancel_proposal',
  'get_task',
  'list_tasks',
  'wait_for_task',
];

async function toolNames(c: Client): Promise<string[]> {
  return (await c.listTools()).tools.map((t) => t.name).sort();
}

async function draft(c: Client): Promise<RevisionResult> {
  return expectOk(
    await m.callTool<RevisionResult>(c, 'create_proposal', { spec: validSpec(), idempotency_key: m.key() }),
  );
}

async function inReview(c: Client): Promise<RevisionResult> {
  const r = await draft(c);
  expectOk(
    await m.callTool(c, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: m.key(),
    }),
  );
  return r;
}

beforeAll(async () => {
  m = await startTestMaster();
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  bob = await m.mcpClient(m.createToken('bob', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  operator = await m.mcpClient(m.operatorToken);
});

afterAll(async () => {
  await m?.close();
});

describe('tools/list is filtered by role', () => {
  it('shows a submitter its tools and none of the reviewer tools', async () => {
    const names = await toolNames(alice);
    expect(names).toEqual(expect.arrayContaining(SUBMITTER_TOOLS));
    for (const t of REVIEWER_ONLY) expect(names).not.toContain(t);
  });

  it('shows a reviewer the review tools but not create_proposal', async () => {
    const names = await toolNames(rita);
    expect(names).toEqual(expect.arrayContaining(REVIEWER_ONLY));
    expect(names).not.toContain('create_proposal');
    expect(names).not.toContain('revise_proposal');
  });

  it('lists exactly the tools a principal may call: every unlisted tool is FORBIDDEN, no listed one is', async () => {
    const all = await toolNames(operator);
    const viewer = await m.mcpClient(m.createToken('vera', ['viewer']));
    for (const [client, who] of [
      [alice, 'submitter'],
      [rita, 'reviewer'],
      [viewer, 'viewer'],
    ] as const) {
      const listed = await toolNames(client);
      const everyTool = [...new Set([...all, ...listed])];
      for (const name of everyTool) {
        // Empty arguments: the role check runs before the input is parsed, and nothing mutates.
        const r = await m.callTool(client, name, {});
        const forbidden = !r.ok && r.error.code === 'FORBIDDEN';
        expect({ who, name, forbidden }).toEqual({ who, name, forbidden: !listed.includes(name) });
      }
    }
  });
});

describe('role checks', () => {
  it('a submitter calling reviewer tools gets FORBIDDEN and changes nothing', async () => {
    const r = await inReview(bob);
    const before = m.counts();
    const e = expectError(
      await m.callTool(alice, 'submit_review', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        decision: 'APPROVE',
        comments: 'lgtm',
        idempotency_key: m.key(),
      }),
      'FORBIDDEN',
    );
    expect(e.message).toContain('submit_review');
    expect(e.retryable).toBe(false);
    expectError(await m.callTool(alice, 'list_review_queue', {}), 'FORBIDDEN');
    expectError(
      await m.callTool(alice, 'get_revision', { proposal_id: r.proposal_id, revision_id: r.revision_id }),
      'FORBIDDEN',
    );
    expect(m.counts()).toEqual(before);
    expect(m.store.proposals.get(r.proposal_id)?.state).toBe('IN_REVIEW');
  });

  it('a reviewer cannot create proposals', async () => {
    expectError(
      await m.callTool(rita, 'create_proposal', { spec: validSpec(), idempotency_key: m.key() }),
      'FORBIDDEN',
    );
  });

  it('a principal holding submitter and reviewer (or operator) cannot review its own proposal', async () => {
    for (const [name, roles] of [
      ['sam', ['submitter', 'reviewer']],
      ['olga', ['submitter', 'operator']],
    ] as const) {
      const both = await m.mcpClient(m.createToken(name, [...roles]));
      const r = await inReview(both);
      const queue = expectOk(
        await m.callTool<{ items: Array<{ proposal_id: string; own: boolean }> }>(
          both,
          'list_review_queue',
          {},
        ),
      );
      expect(queue.items.find((i) => i.proposal_id === r.proposal_id)?.own).toBe(true);
      const before = m.counts();
      for (const decision of ['APPROVE', 'REQUEST_CHANGES', 'REJECT']) {
        expectError(
          await m.callTool(both, 'submit_review', {
            proposal_id: r.proposal_id,
            revision_id: r.revision_id,
            decision,
            comments: 'my own work is great',
            idempotency_key: m.key(),
          }),
          'SELF_REVIEW_FORBIDDEN',
        );
      }
      expect(m.counts()).toEqual(before);
      expect(m.store.proposals.get(r.proposal_id)?.state).toBe('IN_REVIEW');
    }
  });

  it('approving a superseded revision (or with a wrong digest) is STALE_REVISION', async () => {
    const r1 = await inReview(alice);
    const pid = r1.proposal_id;
    expectOk(
      await m.callTool(rita, 'submit_review', {
        proposal_id: pid,
        revision_id: r1.revision_id,
        decision: 'REQUEST_CHANGES',
        comments: 'shorter time limit please',
        idempotency_key: m.key(),
      }),
    );
    const r2 = expectOk(
      await m.callTool<RevisionResult>(alice, 'revise_proposal', {
        proposal_id: pid,
        spec: validSpec({ time_limit_seconds: 30 }),
        idempotency_key: m.key(),
      }),
    );
    expectOk(
      await m.callTool(alice, 'confirm_revision', {
        proposal_id: pid,
        revision_id: r2.revision_id,
        idempotency_key: m.key(),
      }),
    );
    const before = m.counts();
    const stale = expectError(
      await m.callTool(rita, 'submit_review', {
        proposal_id: pid,
        revision_id: r1.revision_id,
        decision: 'APPROVE',
        comments: 'ok',
        idempotency_key: m.key(),
      }),
      'STALE_REVISION',
    );
    expect(stale.hint).toContain(r2.revision_id);
    expectError(
      await m.callTool(rita, 'submit_review', {
        proposal_id: pid,
        revision_id: r2.revision_id,
        revision_digest: r1.digest,
        decision: 'APPROVE',
        comments: 'ok',
        idempotency_key: m.key(),
      }),
      'STALE_REVISION',
    );
    expect(m.counts()).toEqual(before);
    expect(m.store.proposals.get(pid)).toMatchObject({ state: 'IN_REVIEW', task_id: null });
  });
});

describe('visibility', () => {
  it("another submitter's proposal is NOT_FOUND, exactly like one that does not exist", async () => {
    const r = await inReview(alice);
    const pid = r.proposal_id;
    const missing = `prop_${'0'.repeat(26)}`;
    const before = m.counts();

    const foreign = expectError(await m.callTool(bob, 'get_proposal', { proposal_id: pid }), 'NOT_FOUND');
    const absent = expectError(await m.callTool(bob, 'get_proposal', { proposal_id: missing }), 'NOT_FOUND');
    expect(foreign.message.replace(pid, 'ID')).toBe(absent.message.replace(missing, 'ID'));
    expect(foreign.hint).toBe(absent.hint);
    expect(foreign.details).toEqual(absent.details);

    const attempts: Array<[string, Record<string, unknown>]> = [
      ['wait_for_proposal', { proposal_id: pid, timeout_seconds: 0 }],
      ['revise_proposal', { proposal_id: pid, spec: validSpec(), idempotency_key: m.key() }],
      ['confirm_revision', { proposal_id: pid, revision_id: r.revision_id, idempotency_key: m.key() }],
      ['cancel_proposal', { proposal_id: pid, idempotency_key: m.key() }],
    ];
    for (const [tool, args] of attempts) expectError(await m.callTool(bob, tool, args), 'NOT_FOUND');

    const listed = expectOk(
      await m.callTool<{ proposals: Array<{ proposal_id: string; owner: string }> }>(
        bob,
        'list_proposals',
        {},
      ),
    );
    expect(listed.proposals.map((p) => p.proposal_id)).not.toContain(pid);
    expect(listed.proposals.every((p) => p.owner === 'bob')).toBe(true);
    expect(m.counts()).toEqual(before);

    // Reviewers and operators do see it.
    expectOk(await m.callTool(rita, 'get_proposal', { proposal_id: pid }));
    expectOk(await m.callTool(operator, 'get_proposal', { proposal_id: pid }));
  });

  it("another submitter's task is NOT_FOUND", async () => {
    const r = await inReview(alice);
    const approved = expectOk(
      await m.callTool<{ task_id: string }>(rita, 'submit_review', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        decision: 'APPROVE',
        comments: 'fine',
        idempotency_key: m.key(),
      }),
    );
    expectError(await m.callTool(bob, 'get_task', { task_id: approved.task_id }), 'NOT_FOUND');
    expectError(
      await m.callTool(bob, 'wait_for_task', { task_id: approved.task_id, timeout_seconds: 0 }),
      'NOT_FOUND',
    );
    const tasks = expectOk(await m.callTool<{ tasks: Array<{ task_id: string }> }>(bob, 'list_tasks', {}));
    expect(tasks.tasks.map((t) => t.task_id)).not.toContain(approved.task_id);
    expectOk(await m.callTool(alice, 'get_task', { task_id: approved.task_id }));
  });
});
