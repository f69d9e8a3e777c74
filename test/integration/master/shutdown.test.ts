import { afterAll, describe, expect, it } from 'vitest';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { proposeInReview } from '../../support/proposals.js';

/**
 * Stopping the master while agents are connected: a call in flight at close still gets its answer,
 * and close() then finishes instead of waiting out the keep-alive timeout of the busy connection.
 */

let m: TestMaster | undefined;

afterAll(async () => {
  await m?.close();
});

/** Resolves to 'done' when `p` settles, or to 'pending' after `ms` (a bound, not a measurement). */
function within(p: Promise<unknown>, ms: number): Promise<'done' | 'pending'> {
  return Promise.race([
    p.then(
      () => 'done' as const,
      () => 'done' as const,
    ),
    new Promise<'pending'>((r) => setTimeout(() => r('pending'), ms).unref()),
  ]);
}

describe('master close with connected clients', () => {
  it('answers the in-flight wait and closes its keep-alive connection once it is idle', async () => {
    m = await startTestMaster();
    const alice = await m.mcpClient(m.createToken('alice', ['submitter']));
    const r = await proposeInReview(alice);
    const waiting = m.callTool<{ timed_out: boolean }>(alice, 'wait_for_proposal', {
      proposal_id: r.proposal_id,
      timeout_seconds: 1,
    });
    const emitter = (m.deps.notifier as unknown as { emitter: import('node:events').EventEmitter }).emitter;
    for (let i = 0; i < 500 && emitter.listenerCount(`proposal:${r.proposal_id}`) === 0; i++)
      await new Promise((res) => setTimeout(res, 10));

    // Close the server under the client's feet (the harness would close its clients first).
    const closing = m.master.close();
    expect(expectOk(await waiting).timed_out).toBe(true);
    // Without closing connections as they go idle this stays pending for the 72 s keep-alive timeout.
    expect(await within(closing, 20_000)).toBe('done');
  });

  it('wakes a long wait_for_* at close instead of holding shutdown until its timeout', async () => {
    m = await startTestMaster();
    const alice = await m.mcpClient(m.createToken('alice', ['submitter']));
    const r = await proposeInReview(alice);
    const waiting = m.callTool<{ timed_out: boolean }>(alice, 'wait_for_proposal', {
      proposal_id: r.proposal_id,
      timeout_seconds: 25,
    });
    const emitter = (m.deps.notifier as unknown as { emitter: import('node:events').EventEmitter }).emitter;
    for (let i = 0; i < 500 && emitter.listenerCount(`proposal:${r.proposal_id}`) === 0; i++)
      await new Promise((res) => setTimeout(res, 10));
    const closing = m.master.close();
    // Bounded well under the wait's 25 s: without the wake-up the answer and close() arrive only then.
    expect(await within(waiting, 10_000)).toBe('done');
    expect(expectOk(await waiting).timed_out).toBe(true);
    expect(await within(closing, 10_000)).toBe('done');
  });
});
