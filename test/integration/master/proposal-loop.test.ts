import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import type { ProposalView, TaskView } from '../../../src/contracts/views.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { proposeInReview } from '../../support/proposals.js';
import { DISALLOWED_EXECUTABLE, specRunning, validSpec } from '../../support/spec.js';
import { waitFor } from '../../support/wait.js';

/**
 * The whole proposal loop through the real MCP SDK client over HTTPS with the generated CA:
 * create → findings → revise → confirm → request changes → revise → confirm → approve → task QUEUED.
 */

let m: TestMaster;
let alice: Client;
let rita: Client;

interface Waited {
  proposal: ProposalView;
  timed_out: boolean;
}

/** Resolves once a wait_for_proposal call is parked on the proposal's notification topic. */
async function waiterParked(proposalId: string): Promise<void> {
  const emitter = (m.deps.notifier as unknown as { emitter: import('node:events').EventEmitter }).emitter;
  await waitFor(() => emitter.listenerCount(`proposal:${proposalId}`) > 0, {
    what: 'a parked wait_for_proposal',
  });
}

beforeAll(async () => {
  m = await startTestMaster();
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
});

afterAll(async () => {
  await m?.close();
});

describe('proposal loop over MCP/HTTPS', () => {
  it('serves HTTPS with a certificate only the generated CA vouches for', async () => {
    expect(m.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(m.caPem).toContain('BEGIN CERTIFICATE');
    // The platform's default trust store does not know the dev CA.
    await expect(fetch(`${m.url}/healthz`)).rejects.toThrow();
  });

  it('goes from a draft with findings to a QUEUED task after one round of changes', async () => {
    // 1. create: a spec that breaks policy is saved as a DRAFT with error findings.
    const bad = specRunning([DISALLOWED_EXECUTABLE, 'https://example.com'], {
      runtime: { kind: 'process', argv: [DISALLOWED_EXECUTABLE], env: { LD_PRELOAD: '/tmp/x.so' } },
    });
    const r1 = expectOk(
      await m.callTool<RevisionResult>(alice, 'create_proposal', { spec: bad, idempotency_key: m.key() }),
    );
    expect(r1.state).toBe('DRAFT');
    expect(r1.revision_number).toBe(1);
    expect(r1.confirmable).toBe(false);
    expect(r1.findings.filter((f) => f.severity === 'error').map((f) => f.code)).toEqual([
      'EXECUTABLE_NOT_ALLOWED',
      'ENV_REFUSED',
    ]);
    const pid = r1.proposal_id;

    // Confirming a revision with error findings is refused and changes nothing.
    const refused = expectError(
      await m.callTool(alice, 'confirm_revision', {
        proposal_id: pid,
        revision_id: r1.revision_id,
        idempotency_key: m.key(),
      }),
      'POLICY_VIOLATION',
    );
    expect(refused.hint).toContain('runtime.argv[0]');
    expect(m.store.proposals.get(pid)?.state).toBe('DRAFT');

    // 2. revise: a full replacement spec with no findings.
    const r2 = expectOk(
      await m.callTool<RevisionResult>(alice, 'revise_proposal', {
        proposal_id: pid,
        spec: validSpec(),
        idempotency_key: m.key(),
      }),
    );
    expect(r2).toMatchObject({ proposal_id: pid, revision_number: 2, state: 'DRAFT', confirmable: true });
    expect(r2.findings).toEqual([]);

    // Confirming the superseded revision is STALE_REVISION; the current one goes IN_REVIEW.
    expectError(
      await m.callTool(alice, 'confirm_revision', {
        proposal_id: pid,
        revision_id: r1.revision_id,
        idempotency_key: m.key(),
      }),
      'STALE_REVISION',
    );
    const confirmed = expectOk(
      await m.callTool(alice, 'confirm_revision', {
        proposal_id: pid,
        revision_id: r2.revision_id,
        idempotency_key: m.key(),
      }),
    );
    expect(confirmed['state']).toBe('IN_REVIEW');

    // 3. the reviewer sees it in the queue with the exact revision and digest to judge.
    const queue = expectOk(
      await m.callTool<{ items: Array<Record<string, unknown>> }>(rita, 'list_review_queue', {}),
    );
    expect(queue.items).toContainEqual(
      expect.objectContaining({
        proposal_id: pid,
        revision_id: r2.revision_id,
        digest: r2.digest,
        owner: 'alice',
        own: false,
      }),
    );
    const rev2 = expectOk(
      await m.callTool<{
        diff: Array<{ path: string }>;
        diff_base: { revision_id: string } | null;
        unreviewed_between: Array<{ revision_id: string }>;
      }>(rita, 'get_revision', { proposal_id: pid, revision_id: r2.revision_id }),
    );
    // Nobody decided on revision 1, so the diff is against nothing: everything revision 2 holds shows.
    expect(rev2.diff_base).toBeNull();
    expect(rev2.unreviewed_between.map((r) => r.revision_id)).toEqual([r1.revision_id]);
    // Revision 1's LD_PRELOAD is not in revision 2, and nobody saw it: the diff shows revision 2 whole.
    expect(rev2.diff.map((d) => d.path)).toContain('runtime.argv[0]');
    expect(rev2.diff.map((d) => d.path)).not.toContain('runtime.env.LD_PRELOAD');

    // 4. a waiter parked before the review wakes with the decision.
    const waiting = m.callTool<Waited>(alice, 'wait_for_proposal', { proposal_id: pid, timeout_seconds: 25 });
    await waiterParked(pid);
    const changes = expectOk(
      await m.callTool(rita, 'submit_review', {
        proposal_id: pid,
        revision_id: r2.revision_id,
        revision_digest: r2.digest,
        decision: 'REQUEST_CHANGES',
        comments: 'Declare a second output with the timings.',
        idempotency_key: m.key(),
      }),
    );
    expect(changes).toMatchObject({ state: 'CHANGES_REQUESTED', task_id: null });
    const woke = expectOk(await waiting);
    expect(woke.timed_out).toBe(false);
    expect(woke.proposal.state).toBe('CHANGES_REQUESTED');
    expect(woke.proposal.reviews.map((r) => [r.decision, r.reviewer, r.revision_id])).toEqual([
      ['REQUEST_CHANGES', 'rita', r2.revision_id],
    ]);

    // 5. revise again (back to DRAFT) and confirm.
    const r3 = expectOk(
      await m.callTool<RevisionResult>(alice, 'revise_proposal', {
        proposal_id: pid,
        spec: validSpec({
          outputs: [
            { path: 'result.json', required: true },
            { path: 'timings/steps.csv', required: false },
          ],
        }),
        idempotency_key: m.key(),
      }),
    );
    expect(r3).toMatchObject({ revision_number: 3, state: 'DRAFT', confirmable: true });
    expectOk(
      await m.callTool(alice, 'confirm_revision', {
        proposal_id: pid,
        revision_id: r3.revision_id,
        idempotency_key: m.key(),
      }),
    );

    // Approving the revision the reviewer saw before is refused: it was superseded.
    expectError(
      await m.callTool(rita, 'submit_review', {
        proposal_id: pid,
        revision_id: r2.revision_id,
        decision: 'APPROVE',
        comments: 'ok',
        idempotency_key: m.key(),
      }),
      'STALE_REVISION',
    );

    // 6. approve the current revision: the proposal points at a QUEUED task built from exactly it.
    const approved = expectOk(
      await m.callTool<{ state: string; task_id: string | null }>(rita, 'submit_review', {
        proposal_id: pid,
        revision_id: r3.revision_id,
        revision_digest: r3.digest,
        decision: 'APPROVE',
        comments: 'Outputs declared; the command is harmless.',
        idempotency_key: m.key(),
      }),
    );
    expect(approved.state).toBe('APPROVED');
    expect(approved.task_id).toMatch(/^task_/);

    const final = expectOk(
      await m.callTool<{ proposal: ProposalView }>(alice, 'get_proposal', { proposal_id: pid }),
    );
    expect(final.proposal).toMatchObject({
      state: 'APPROVED',
      task_id: approved.task_id,
      revision_count: 3,
      expires_at: null,
    });
    expect(final.proposal.current_revision).toMatchObject({ revision_id: r3.revision_id, confirmed: true });
    expect(final.proposal.reviews.map((r) => r.decision)).toEqual(['REQUEST_CHANGES', 'APPROVE']);

    const task = expectOk(
      await m.callTool<{ task: TaskView }>(alice, 'get_task', { task_id: approved.task_id }),
    );
    expect(task.task).toMatchObject({
      task_id: approved.task_id,
      proposal_id: pid,
      revision_id: r3.revision_id,
      spec_digest: r3.digest,
      state: 'QUEUED',
      owner: 'alice',
    });

    // A wait on a decided proposal returns at once.
    const settled = expectOk(
      await m.callTool<Waited>(alice, 'wait_for_proposal', { proposal_id: pid, timeout_seconds: 25 }),
    );
    expect(settled.timed_out).toBe(false);
    expect(settled.proposal.state).toBe('APPROVED');

    // Every step is in the audit chain, in order, and the chain verifies.
    expect(m.store.audit.forSubject('proposal', pid).map((e) => e.action)).toEqual([
      'proposal.created',
      'proposal.revise',
      'proposal.confirm',
      'proposal.request_changes',
      'proposal.revise',
      'proposal.confirm',
      'proposal.approve',
    ]);
    expect(m.store.audit.forSubject('task', approved.task_id!).map((e) => e.action)).toEqual([
      'task.created',
    ]);
    expect(m.store.audit.verify()).toMatchObject({ ok: true });
  });

  it('wait_for_proposal returns timed_out: true at its timeout and refuses more than 25 s', async () => {
    const r = await proposeInReview(alice);
    const waited = expectOk(
      await m.callTool<Waited>(alice, 'wait_for_proposal', {
        proposal_id: r.proposal_id,
        timeout_seconds: 0.2,
      }),
    );
    expect(waited.timed_out).toBe(true);
    expect(waited.proposal.state).toBe('IN_REVIEW');

    const tooLong = expectError(
      await m.callTool(alice, 'wait_for_proposal', { proposal_id: r.proposal_id, timeout_seconds: 26 }),
      'INVALID_INPUT',
    );
    expect(tooLong.message).toContain('timeout_seconds');
  });

  it('a rejected proposal is final: no revision, confirmation or second review moves it', async () => {
    const r = expectOk(
      await m.callTool<RevisionResult>(alice, 'create_proposal', {
        spec: validSpec(),
        idempotency_key: m.key(),
      }),
    );
    const args = { proposal_id: r.proposal_id, revision_id: r.revision_id };
    expectOk(await m.callTool(alice, 'confirm_revision', { ...args, idempotency_key: m.key() }));
    expectOk(
      await m.callTool(rita, 'submit_review', {
        ...args,
        decision: 'REJECT',
        comments: 'Not a GPU workload.',
        idempotency_key: m.key(),
      }),
    );
    const before = m.counts();
    expectError(
      await m.callTool(alice, 'revise_proposal', {
        proposal_id: r.proposal_id,
        spec: validSpec(),
        idempotency_key: m.key(),
      }),
      'INVALID_STATE',
    );
    expectError(
      await m.callTool(rita, 'submit_review', {
        ...args,
        decision: 'APPROVE',
        comments: 'changed my mind',
        idempotency_key: m.key(),
      }),
      'INVALID_STATE',
    );
    expectError(
      await m.callTool(alice, 'cancel_proposal', { proposal_id: r.proposal_id, idempotency_key: m.key() }),
      'INVALID_STATE',
    );
    expect(m.counts()).toEqual(before);
    expect(m.store.proposals.get(r.proposal_id)?.state).toBe('REJECTED');
  });

  it('cancel_proposal says what next; on an APPROVED proposal it points to cancel_task, whose result says it is cancelling', async () => {
    const withdrawn = await proposeInReview(alice);
    const cancelled = expectOk(
      await m.callTool<{ state: string; next_action: string }>(alice, 'cancel_proposal', {
        proposal_id: withdrawn.proposal_id,
        idempotency_key: m.key(),
      }),
    );
    expect(cancelled).toEqual({
      proposal_id: withdrawn.proposal_id,
      state: 'CANCELLED',
      next_action: 'Withdrawn; nothing will run. To run something, create a new proposal.',
    });

    const r = await proposeInReview(alice);
    const approved = expectOk(
      await m.callTool<{ task_id: string | null }>(rita, 'submit_review', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        decision: 'APPROVE',
        comments: 'ok',
        idempotency_key: m.key(),
      }),
    );
    const taskId = approved.task_id!;
    const refused = expectError(
      await m.callTool(alice, 'cancel_proposal', { proposal_id: r.proposal_id, idempotency_key: m.key() }),
      'INVALID_STATE',
    );
    expect(refused.hint).toBe(`To stop the run, call cancel_task with task_id ${taskId}.`);

    const task = expectOk(
      await m.callTool<{ task: TaskView }>(alice, 'cancel_task', {
        task_id: taskId,
        idempotency_key: m.key(),
      }),
    );
    expect(task.task.next_action).not.toContain('Running');
    expect(task.task.next_action).toMatch(/^Cancel/);
  });
});
