import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { proposeInReview } from '../../support/proposals.js';
import { removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * The `/mcp` servers are shared by every client (docs/decisions/0045-one-mcp-server-per-instructions.md):
 * a client that hangs up during a long-poll cancels its own wait (its place among the principal's waits is
 * given back at once, not after the 20 s timeout) and nobody else's.
 */

let m: TestMaster;

beforeAll(async () => {
  m = await startTestMaster();
});

afterAll(async () => {
  await m?.close();
  removeTempDirs();
});

/** A raw wait_for_proposal over HTTPS that the test can abort, as a client hanging up would. */
function rawWait(token: string, proposalId: string) {
  const controller = new AbortController();
  const done = m
    .fetch(`${m.url}/mcp`, {
      method: 'POST',
      signal: controller.signal,
      headers: {
        authorization: `Bearer ${token}`,
        accept: 'application/json, text/event-stream',
        'content-type': 'application/json',
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'wait_for_proposal', arguments: { proposal_id: proposalId, timeout_seconds: 20 } },
      }),
    })
    .then(
      () => 'answered',
      () => 'aborted',
    );
  return { abort: () => controller.abort(), done };
}

describe('a client hanging up on /mcp', () => {
  it('cancels its own long-poll at once and leaves another client’s running', async () => {
    const aliceToken = m.createToken('alice', ['submitter']);
    const bobToken = m.createToken('bob', ['submitter']);
    const alice = m.store.principals.findByName('alice')!;
    const bob = m.store.principals.findByName('bob')!;
    const aliceProposal = await proposeInReview(await m.mcpClient(aliceToken));
    const bobProposal = await proposeInReview(await m.mcpClient(bobToken));
    const waits = m.deps.runtime.costs.waits;

    // Both wait with the same JSON-RPC id on the same shared server.
    const a = rawWait(aliceToken, aliceProposal.proposal_id);
    const b = rawWait(bobToken, bobProposal.proposal_id);
    await waitFor(() => waits.heldBy(alice.id) === 1 && waits.heldBy(bob.id) === 1);

    a.abort();
    expect(await a.done).toBe('aborted');
    // Given back long before the wait's own 20 s timeout could have.
    await waitFor(() => waits.heldBy(alice.id) === 0, 5_000);
    expect(waits.heldBy(bob.id)).toBe(1);

    b.abort();
    expect(await b.done).toBe('aborted');
    await waitFor(() => waits.heldBy(bob.id) === 0, 5_000);
  });
});
