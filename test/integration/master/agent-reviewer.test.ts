import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { proposeInReview } from '../../support/proposals.js';
import { validSpec } from '../../support/spec.js';

/**
 * ADR 0027 through a real master and the real MCP SDK client: an agent reviewer approves only within
 * the operator's ceiling; above it the approval is refused with NEEDS_PERSON, nothing of the review is
 * written, and the proposal stays IN_REVIEW flagged for a person. REJECT and REQUEST_CHANGES always work.
 */

let m: TestMaster;
let submitter: Client;
let agent: Client;
let person: Client;

beforeAll(async () => {
  m = await startTestMaster();
  submitter = await m.mcpClient(m.createToken('sam', ['submitter']));
  agent = await m.mcpClient(m.createToken('claude-rev', ['agent_reviewer']));
  person = await m.mcpClient(m.createToken('rita', ['reviewer']));
});
afterAll(async () => {
  await m?.close();
});

interface QueueItem {
  proposal_id: string;
  needs_person: { by: string; clause: string; reason: string; attempts: number } | null;
}

const review = (
  client: Client,
  r: { proposal_id: string; revision_id: string; digest: string },
  decision: string,
) =>
  m.callTool(client, 'submit_review', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    revision_digest: r.digest,
    decision,
    comments: 'checked',
    idempotency_key: m.key(),
  });

const state = async (proposalId: string) =>
  expectOk(
    await m.callTool<{ proposal: { state: string } }>(person, 'get_proposal', { proposal_id: proposalId }),
  ).proposal.state;

describe('agent reviewer tokens', () => {
  it('hold only the agent_reviewer role', () => {
    expect(() => createPrincipal(m.deps, { name: 'mixed', roles: ['agent_reviewer', 'reviewer'] })).toThrow(
      /only the agent_reviewer role/,
    );
  });

  it('are told the ceiling first, in the server instructions', () => {
    const text = agent.getInstructions() ?? '';
    expect(text).toContain('agent_reviewer token');
    expect(text).toContain('NEEDS_PERSON');
    expect(person.getInstructions() ?? '').not.toContain('agent_reviewer token');
  });

  it('may read the queue and revisions but never propose', async () => {
    expectOk(await m.callTool(agent, 'list_review_queue', {}));
    expectError(
      await m.callTool(agent, 'create_proposal', { spec: validSpec(), idempotency_key: m.key() }),
      'FORBIDDEN',
    );
  });
});

describe('the ceiling', () => {
  it('an approval within it queues the task', async () => {
    const r = await proposeInReview(submitter);
    expect(expectOk(await review(agent, r, 'APPROVE'))).toMatchObject({ state: 'APPROVED' });
  });

  it('an approval above it is NEEDS_PERSON naming the first failing clause; only the flag is written', async () => {
    const r = await proposeInReview(submitter, validSpec({ cards: { count: 4 } }));
    const before = m.counts();
    const err = expectError(await review(agent, r, 'APPROVE'), 'NEEDS_PERSON');
    expect(err.message).toContain('cards 4 > 1');
    expect(err.details).toMatchObject({ clause: 'cards', reason: 'cards 4 > 1' });
    expect(m.counts()).toEqual({ ...before, audit_events: before.audit_events + 1 });
    expect(await state(r.proposal_id)).toBe('IN_REVIEW');
    const audit = m.store.db
      .prepare(
        "SELECT actor, data FROM audit_events WHERE action = 'review.escalated' ORDER BY seq DESC LIMIT 1",
      )
      .get() as { actor: string; data: string };
    expect(audit.actor).toBe('claude-rev');
    expect(JSON.parse(audit.data)).toMatchObject({ clause: 'cards', revision_id: r.revision_id });

    expectError(await review(agent, r, 'APPROVE'), 'NEEDS_PERSON');
    const { items } = expectOk(await m.callTool<{ items: QueueItem[] }>(person, 'list_review_queue', {}));
    const flagged = items.find((i) => i.proposal_id === r.proposal_id);
    expect(flagged?.needs_person).toMatchObject({
      by: 'claude-rev',
      clause: 'cards',
      reason: 'cards 4 > 1',
      attempts: 2,
    });

    // A person decides it.
    expect(expectOk(await review(person, r, 'APPROVE'))).toMatchObject({ state: 'APPROVED' });
  });

  it('REJECT and REQUEST_CHANGES are always allowed, whatever the revision asks', async () => {
    const a = await proposeInReview(submitter, validSpec({ cards: { count: 8 }, time_limit_seconds: 3600 }));
    expect(expectOk(await review(agent, a, 'REQUEST_CHANGES'))).toMatchObject({ state: 'CHANGES_REQUESTED' });
    const b = await proposeInReview(submitter, validSpec({ cards: { count: 8 } }));
    expect(expectOk(await review(agent, b, 'REJECT'))).toMatchObject({ state: 'REJECTED' });
  });

  it('an operator widens the ceiling in config', async () => {
    const wide = await startTestMaster({ config: { review: { agent_ceiling: { max_cards: 4 } } } });
    try {
      const s = await wide.mcpClient(wide.createToken('sam', ['submitter']));
      const a = await wide.mcpClient(wide.createToken('agent', ['agent_reviewer']));
      const r = await proposeInReview(s, validSpec({ cards: { count: 4 } }));
      const ok = await wide.callTool(a, 'submit_review', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        decision: 'APPROVE',
        comments: 'ok',
        idempotency_key: wide.key(),
      });
      expect(expectOk(ok)).toMatchObject({ state: 'APPROVED' });
    } finally {
      await wide.close();
    }
  });
});

describe('metrics', () => {
  it('count decisions by kind with the time from confirm to decision', async () => {
    const res = await m.fetch(new URL('/metrics', m.url), {
      headers: { authorization: `Bearer ${m.operatorToken}` },
    });
    const text = await res.text();
    expect(text).toMatch(/gpu_broker_review_decision_seconds_count\{kind="agent_reviewer"\} 3/);
    expect(text).toMatch(/gpu_broker_review_decision_seconds_count\{kind="person"\} 1/);
    expect(text).toMatch(/gpu_broker_review_decisions_total\{kind="agent_reviewer",decision="APPROVE"\} 1/);
    expect(text).toMatch(/gpu_broker_review_decisions_total\{kind="agent_reviewer",decision="REJECT"\} 1/);
  });
});

describe('get_review_prompt', () => {
  const upload = async (files: Array<{ path: string; content: string; encoding: 'utf8' | 'base64' }>) =>
    expectOk(
      await m.callTool<{ inputs: Array<{ path: string; sha256: string; size: number }> }>(
        submitter,
        'upload_inputs',
        {
          files,
          idempotency_key: m.key(),
        },
      ),
    ).inputs;

  it('is for reviewers only', async () => {
    const r = await proposeInReview(submitter);
    expectError(
      await m.callTool(submitter, 'get_review_prompt', { proposal_id: r.proposal_id }),
      'FORBIDDEN',
    );
  });

  it('never reads a file beyond max_bytes, and says the prompt is not complete', async () => {
    const inputs = await upload([
      { path: 'big.sh', content: `${'#'.repeat(4000)}\necho ok\n`, encoding: 'utf8' },
    ]);
    const r = await proposeInReview(
      submitter,
      validSpec({ inputs, runtime: { kind: 'process', argv: ['/bin/sh', 'big.sh'] } }),
    );
    const out = expectOk(
      await m.callTool<{ complete: boolean; prompt: string }>(agent, 'get_review_prompt', {
        proposal_id: r.proposal_id,
        max_bytes: 1024,
      }),
    );
    expect(out.complete).toBe(false);
    expect(out.prompt).toContain('## file "big.sh" (4009 bytes): beyond max_bytes, not shown');
    expect(out.prompt).toContain('complete: false');
    const whole = expectOk(
      await m.callTool<{ complete: boolean; prompt: string }>(agent, 'get_review_prompt', {
        proposal_id: r.proposal_id,
      }),
    );
    expect(whole.complete).toBe(true);
    expect(whole.prompt).toContain('| echo ok');
  });

  it('shows a binary input as not shown, never as text', async () => {
    const inputs = await upload([
      { path: 'blob.bin', content: Buffer.from([0, 1, 2, 255, 0]).toString('base64'), encoding: 'base64' },
    ]);
    const r = await proposeInReview(submitter, validSpec({ inputs }));
    const out = expectOk(
      await m.callTool<{ complete: boolean; prompt: string; agent_ceiling: { within: boolean } }>(
        agent,
        'get_review_prompt',
        {
          proposal_id: r.proposal_id,
        },
      ),
    );
    expect(out.complete).toBe(false);
    expect(out.prompt).toContain('## file "blob.bin" (5 bytes): binary, not shown');
  });
});

describe('no agent approves a revision whose material the prompt cannot show (docs/security.md "Code the reviewer did not read")', () => {
  const upload = async (files: Array<{ path: string; content: string; encoding: 'utf8' | 'base64' }>) =>
    expectOk(
      await m.callTool<{ inputs: Array<{ path: string; sha256: string; size: number }> }>(
        submitter,
        'upload_inputs',
        { files, idempotency_key: m.key() },
      ),
    ).inputs;
  const flagOf = async (proposalId: string) =>
    expectOk(await m.callTool<{ items: QueueItem[] }>(person, 'list_review_queue', {})).items.find(
      (i) => i.proposal_id === proposalId,
    )?.needs_person;

  it('a binary input: an APPROVE straight over MCP is NEEDS_PERSON (readable), flagged; a person may approve', async () => {
    const inputs = await upload([
      {
        path: 'kernel.so',
        content: Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 1]).toString('base64'),
        encoding: 'base64',
      },
    ]);
    const r = await proposeInReview(submitter, validSpec({ inputs }));
    expect(r.findings).toEqual([]);
    const before = m.counts();
    const err = expectError(await review(agent, r, 'APPROVE'), 'NEEDS_PERSON');
    expect(err.details).toMatchObject({ clause: 'readable' });
    expect(err.message).toContain('"kernel.so"');
    expect(m.counts()).toEqual({ ...before, audit_events: before.audit_events + 1 });
    expect(await state(r.proposal_id)).toBe('IN_REVIEW');
    expect(await flagOf(r.proposal_id)).toMatchObject({ by: 'claude-rev', clause: 'readable' });
    // The prompt says the same: the ceiling is not met, and the prompt is not complete.
    const prompt = expectOk(
      await m.callTool<{ complete: boolean; agent_ceiling: { within: boolean; clause: string } }>(
        agent,
        'get_review_prompt',
        { proposal_id: r.proposal_id },
      ),
    );
    expect(prompt).toMatchObject({ complete: false, agent_ceiling: { within: false, clause: 'readable' } });
    expect(expectOk(await review(person, r, 'APPROVE'))).toMatchObject({ state: 'APPROVED' });
  });

  it('variants: bytes that are not UTF-8, or one NUL, are not text either', async () => {
    for (const bytes of [
      [0x23, 0x20, 0xe9, 0x0a],
      [0x70, 0x61, 0x73, 0x73, 0x00, 0x0a],
    ]) {
      const inputs = await upload([
        { path: 'table.dat', content: Buffer.from(bytes).toString('base64'), encoding: 'base64' },
      ]);
      const r = await proposeInReview(submitter, validSpec({ inputs }));
      const err = expectError(await review(agent, r, 'APPROVE'), 'NEEDS_PERSON');
      expect(err.details).toMatchObject({ clause: 'readable' });
      expect(err.message).toContain('"table.dat"');
      // REQUEST_CHANGES still works: an agent can always send work back.
      expect(expectOk(await review(agent, r, 'REQUEST_CHANGES'))).toMatchObject({
        state: 'CHANGES_REQUESTED',
      });
    }
  });

  it('text beyond the prompt budget (within max_input_bytes) is NEEDS_PERSON too; the same text within it is approved', async () => {
    const big = await upload([
      { path: 'big.py', content: `# ${'x'.repeat(300 * 1024)}\n`, encoding: 'utf8' },
    ]);
    const r = await proposeInReview(submitter, validSpec({ inputs: big }));
    const err = expectError(await review(agent, r, 'APPROVE'), 'NEEDS_PERSON');
    expect(err.details).toMatchObject({ clause: 'readable' });
    expect(err.message).toMatch(/262144/);
    const small = await upload([{ path: 'small.py', content: '# fine\n', encoding: 'utf8' }]);
    const ok = await proposeInReview(submitter, validSpec({ inputs: small }));
    expect(expectOk(await review(agent, ok, 'APPROVE'))).toMatchObject({ state: 'APPROVED' });
  });
});
