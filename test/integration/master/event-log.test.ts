import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/platform/logger.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { proposeInReview } from '../../support/proposals.js';

/**
 * The server log tells a proposal's story (docs/operations.md): a real master with a JSON logger, a
 * proposal created, confirmed and approved, and its task cancelled, through the real MCP client — each
 * step is one log line naming the event, its subject and who did it; a refused step logs nothing.
 */

const lines: Array<Record<string, unknown>> = [];
let m: TestMaster;

beforeAll(async () => {
  const destination = {
    write: (t: string) => {
      for (const l of t.split('\n').filter(Boolean)) lines.push(JSON.parse(l) as Record<string, unknown>);
    },
  };
  m = await startTestMaster({ logger: createLogger('info', { pretty: false, destination }) });
});

afterAll(async () => {
  await m?.close();
});

describe('the server log', () => {
  it('has a line per proposal, review and task event, with who did it', async () => {
    const alice = await m.mcpClient(m.createToken('alice', ['submitter']));
    const rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
    const r = await proposeInReview(alice);
    const reviewed = expectOk(
      await m.callTool<{ task_id: string }>(rita, 'submit_review', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        decision: 'APPROVE',
        comments: 'fine',
        idempotency_key: m.key(),
      }),
    );
    expectOk(await m.callTool(alice, 'cancel_task', { task_id: reviewed.task_id, idempotency_key: m.key() }));
    const before = lines.length;
    expectError(
      await m.callTool(alice, 'cancel_proposal', { proposal_id: r.proposal_id, idempotency_key: m.key() }),
      'INVALID_STATE',
    );
    expect(lines.slice(before).filter((l) => l['event'])).toEqual([]);

    const about = (id: string) =>
      lines.filter((l) => l['subject'] === id).map((l) => `${l['event']} by ${l['actor']}`);
    expect(about(r.proposal_id)).toEqual(
      expect.arrayContaining(['proposal.created by alice', expect.stringMatching(/ by rita$/)]),
    );
    const taskEvents = about(reviewed.task_id);
    expect(taskEvents[0]).toMatch(/^task\.created by /);
    expect(taskEvents.some((e) => /cancel/.test(e) && e.endsWith('by alice'))).toBe(true);
    const created = lines.find((l) => l['event'] === 'proposal.created' && l['subject'] === r.proposal_id);
    expect(created?.['msg']).toBe(`proposal.created ${r.proposal_id} by alice`);
    await alice.close();
    await rita.close();
  });
});
