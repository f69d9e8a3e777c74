import { afterAll, describe, expect, it } from 'vitest';
import type { ProposalView } from '../../../src/contracts/views.js';
import { ManualClock } from '../../../src/platform/clock.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { proposeInReview } from '../../support/proposals.js';
import { waitFor } from '../../support/wait.js';

/** The running master's sweeper expires proposals on its own once the (injected) clock passes the TTL. */

let m: TestMaster | undefined;

afterAll(async () => {
  await m?.close();
});

describe('expiry sweeper in a running master', () => {
  it('moves a proposal past its TTL to EXPIRED, wakes its waiter, and audits it', async () => {
    const clock = new ManualClock();
    m = await startTestMaster({
      clock,
      config: { timing: { proposal_ttl_seconds: 60, sweep_interval_ms: 20 } },
    });
    const alice = await m.mcpClient(m.createToken('alice', ['submitter']));
    const r = await proposeInReview(alice);
    const waiting = m.callTool<{ proposal: ProposalView; timed_out: boolean }>(alice, 'wait_for_proposal', {
      proposal_id: r.proposal_id,
      timeout_seconds: 25,
    });
    clock.advance(60_000);
    const mm = m;
    await waitFor(() => mm.store.proposals.get(r.proposal_id)?.state === 'EXPIRED', { what: 'the sweeper' });
    const woke = expectOk(await waiting);
    expect(woke).toMatchObject({ timed_out: false, proposal: { state: 'EXPIRED', expires_at: null } });
    expect(m.store.audit.forSubject('proposal', r.proposal_id).at(-1)).toMatchObject({
      actor: 'sweeper',
      action: 'proposal.expire',
    });
  });
});
