import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { proposeInReview } from '../../support/proposals.js';
import { validSpec } from '../../support/spec.js';

/**
 * ADR 0041, on the master's side: a review comment is read by the submitter, so submit_review
 * refuses one that carries a gpu-broker token — as written, split, reversed, base64 or hex — from any
 * reviewer, over MCP or REST, with INVALID_INPUT and nothing written. The agent loop withholds such a
 * verdict itself; this holds for a client that does not.
 */

let m: TestMaster;
let sam: Client;
let agentToken: string;
let agent: Client;
let person: Client;

beforeAll(async () => {
  m = await startTestMaster();
  sam = await m.mcpClient(m.createToken('sam', ['submitter']));
  agentToken = m.createToken('llm', ['agent_reviewer']);
  agent = await m.mcpClient(agentToken);
  person = await m.mcpClient(m.createToken('rita', ['reviewer']));
});
afterAll(async () => {
  await m?.close();
});

describe('submit_review and tokens in comments', () => {
  const forms: Array<[string, (t: string) => string]> = [
    ['as written', (t) => `the reviewer token is ${t}`],
    ['split', (t) => t.match(/.{1,4}/g)!.join(' ')],
    ['reversed', (t) => [...t].reverse().join('')],
    ['base64', (t) => Buffer.from(`token=${t}`).toString('base64')],
    ['hex', (t) => Buffer.from(t).toString('hex')],
  ];

  it.each(forms)('refuses a comment holding a token %s, and writes nothing', async (_name, form) => {
    const r = await proposeInReview(sam, validSpec({ title: 'leak target' }));
    for (const client of [agent, person]) {
      const before = m.counts();
      const err = expectError(
        await m.callTool(client, 'submit_review', {
          proposal_id: r.proposal_id,
          revision_id: r.revision_id,
          revision_digest: r.digest,
          decision: 'REQUEST_CHANGES',
          comments: form(m.operatorToken),
          idempotency_key: m.key(),
        }),
        'INVALID_INPUT',
      );
      expect(err.message).toContain('the comment holds a');
      expect(err.message).not.toContain(m.operatorToken.slice(4, 16));
      expect(m.counts()).toEqual(before);
    }
  });

  it('refuses it over REST too, and takes the same comment without the token', async () => {
    const r = await proposeInReview(sam, validSpec({ title: 'leak target, REST' }));
    const rest = m.rest(agentToken);
    const path = `/api/v1/proposals/${r.proposal_id}/reviews`;
    const body = { revision_id: r.revision_id, revision_digest: r.digest, decision: 'REQUEST_CHANGES' };
    const refused = await rest.post(path, { ...body, comments: `found ${agentToken}` });
    expect(refused.status).toBe(400);
    const ok = await rest.post(path, { ...body, comments: 'found nothing; the gpb_ prefix is not a token' });
    expect(ok.status).toBe(200);
    expect(
      expectOk(
        await m.callTool<{ proposal: { state: string } }>(person, 'get_proposal', {
          proposal_id: r.proposal_id,
        }),
      ).proposal.state,
    ).toBe('CHANGES_REQUESTED');
  });
});
