import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskSpecInput } from '../../../src/contracts/task-spec.js';
import { ManualClock } from '../../../src/platform/clock.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectError, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/**
 * ADR 0024: one token wrote 400 revisions of 250 KiB in 5 s and revisions were never pruned.
 * Now a principal's open proposals, revisions per proposal and per hour, and stored revision bytes are
 * capped (QUOTA_EXCEEDED naming the cap, nothing written), and abandoned proposals and old unreviewed
 * revisions are pruned — never a revision a reviewer decided on, one a task ran, or the latest.
 */

interface Created {
  proposal_id: string;
  revision_id: string;
  digest: string;
}

const DAY_MS = 86_400_000;
let m: TestMaster;
let clock: ManualClock;
let rita: Client;

beforeAll(async () => {
  clock = new ManualClock(Date.now());
  m = await startTestMaster({
    clock,
    config: {
      quotas: {
        max_open_proposals: 2,
        max_revisions_per_proposal: 4,
        max_revisions_per_hour: 5,
        max_revision_bytes: 40_000,
      },
      pruning: { revision_days: 7, proposal_days: 7 },
    },
  });
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
});

afterAll(async () => {
  await m?.close();
});

const spec = (notes = 'Writes one small JSON file; nothing else.'): TaskSpecInput => validSpec({ notes });

function create(client: Client, s: TaskSpecInput = spec()) {
  return m.callTool<Created>(client, 'create_proposal', { spec: s, idempotency_key: m.key() });
}

function revise(client: Client, id: string, s: TaskSpecInput = spec()) {
  return m.callTool<Created>(client, 'revise_proposal', {
    proposal_id: id,
    spec: s,
    idempotency_key: m.key(),
  });
}

async function decide(client: Client, r: Created, decision: 'REQUEST_CHANGES' | 'APPROVE'): Promise<void> {
  expectOk(
    await m.callTool(client, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: m.key(),
    }),
  );
  expectOk(
    await m.callTool(rita, 'submit_review', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      decision,
      comments: 'checked',
      idempotency_key: m.key(),
    }),
  );
}

describe('per-principal caps', () => {
  it('refuses a third open proposal, naming the cap; cancelling one makes room', async () => {
    const a = await m.mcpClient(m.createToken('quota-open', ['submitter']));
    const first = expectOk(await create(a));
    expectOk(await create(a));
    const before = m.counts();
    const err = expectError(await create(a), 'QUOTA_EXCEEDED');
    expect(err.message).toBe('you have 2 open proposals; the cap is 2');
    expect(err.hint).toMatch(/cancel_proposal/);
    expect(err.details).toEqual({ cap: 'quotas.max_open_proposals', limit: 2, used: 2 });
    expect(err.retryable).toBe(true);
    expect(m.counts()).toEqual(before); // nothing written, not even an audit row
    expectOk(
      await m.callTool(a, 'cancel_proposal', { proposal_id: first.proposal_id, idempotency_key: m.key() }),
    );
    expectOk(await create(a));
  });

  it('caps revisions per proposal and per hour; the hour is a sliding window', async () => {
    const b = await m.mcpClient(m.createToken('quota-revs', ['submitter']));
    const p = expectOk(await create(b));
    for (let i = 0; i < 3; i++) expectOk(await revise(b, p.proposal_id));
    expect(expectError(await revise(b, p.proposal_id), 'QUOTA_EXCEEDED').details).toMatchObject({
      cap: 'quotas.max_revisions_per_proposal',
      limit: 4,
    });
    const q = expectOk(await create(b)); // revision 5 this hour
    const hourly = expectError(await revise(b, q.proposal_id), 'QUOTA_EXCEEDED');
    expect(hourly.details).toMatchObject({ cap: 'quotas.max_revisions_per_hour', limit: 5, used: 5 });
    expect(hourly.hint).toMatch(/Wait and retry/);
    clock.advance(3600_000 + 1);
    expectOk(await revise(b, q.proposal_id));
  });

  it('caps the bytes a principal’s revisions hold', async () => {
    const c = await m.mcpClient(m.createToken('quota-bytes', ['submitter']));
    const big = spec('n'.repeat(7900));
    const p = expectOk(await create(c, big));
    expectOk(await revise(c, p.proposal_id, big));
    expectOk(await revise(c, p.proposal_id, big));
    expectOk(await revise(c, p.proposal_id, big));
    const q = expectOk(await create(c, spec()));
    expect(q.proposal_id).toBeDefined();
    clock.advance(3600_000 + 1); // the per-hour cap is not what this test is about
    const usage = m.store.proposals.revisionUsage(m.store.principals.findByName('quota-bytes')!.id);
    expect(usage.revisions).toBe(5);
    const err = expectError(await revise(c, q.proposal_id, big), 'QUOTA_EXCEEDED');
    expect(err.details).toMatchObject({ cap: 'quotas.max_revision_bytes', limit: 40_000, used: usage.bytes });
    expect(err.message).toMatch(/^storing \d+ more bytes of revisions would put you at \d+ of 40000$/);
  });
});

describe('pruning', () => {
  it('deletes abandoned proposals and old unreviewed revisions, never a decided, ran or latest one', async () => {
    const d = await m.mcpClient(m.createToken('pruned', ['submitter']));
    const dId = m.store.principals.findByName('pruned')!.id;
    // A: r1 judged (REQUEST_CHANGES), r2 and r3 never confirmed, r4 the latest.
    const a1 = expectOk(await create(d, spec('first')));
    await decide(d, a1, 'REQUEST_CHANGES');
    const a2 = expectOk(await revise(d, a1.proposal_id, spec('second: adds a payload')));
    const a3 = expectOk(await revise(d, a1.proposal_id, spec('third')));
    clock.advance(3600_000 + 1); // the per-hour cap
    const a4 = expectOk(await revise(d, a1.proposal_id, spec('fourth')));
    // B: cancelled without any review: abandoned.
    const b = expectOk(await create(d));
    expectOk(
      await m.callTool(d, 'cancel_proposal', { proposal_id: b.proposal_id, idempotency_key: m.key() }),
    );
    clock.advance(3600_000 + 1);
    // C: approved; its task ran revision 1.
    const c = expectOk(await create(d, spec('approved')));
    await decide(d, c, 'APPROVE');
    const bytesBefore = m.store.proposals.revisionUsage(dId).bytes;

    // Not yet old enough: nothing goes.
    expect(await m.master.pruning.run()).toEqual({ proposals: 0, revisions: 0 });
    clock.advance(8 * DAY_MS);
    // Counts include the earlier tests' drafts (same master); what this principal lost is checked below.
    const result = await m.master.pruning.run();
    expect(result.proposals).toBeGreaterThanOrEqual(1);
    expect(result.revisions).toBeGreaterThanOrEqual(3);

    const revisions = (id: string) => m.store.proposals.revisions(id).map((r) => r.id);
    expect(revisions(a1.proposal_id)).toEqual([a1.revision_id, a4.revision_id]);
    expect(m.store.proposals.get(b.proposal_id)).toBeUndefined();
    expect(revisions(c.proposal_id)).toEqual([c.revision_id]);
    expect(m.store.proposals.revisionUsage(dId).bytes).toBeLessThan(bytesBefore);
    expectError(await m.callTool(d, 'get_proposal', { proposal_id: b.proposal_id }), 'NOT_FOUND');

    // The reviewer still sees r4 against what was judged; the pruned revisions are folded into it.
    const view = expectOk(
      await m.callTool<{
        diff_base: { revision_id: string } | null;
        unreviewed_between: unknown[];
        diff: Array<{ path: string; after?: unknown }>;
      }>(rita, 'get_revision', { proposal_id: a1.proposal_id, revision_id: a4.revision_id }),
    );
    expect(view.diff_base?.revision_id).toBe(a1.revision_id);
    expect(view.unreviewed_between).toEqual([]);
    expect(view.diff).toContainEqual(expect.objectContaining({ path: 'notes', after: 'fourth' }));

    // Audit rows say what went.
    const pruned = m.store.audit.forSubject('proposal', b.proposal_id).at(-1);
    expect(pruned).toMatchObject({ action: 'proposal.pruned', actor: 'pruner', data: { revisions: 1 } });
    const fold = m.store.audit.forSubject('proposal', a1.proposal_id).at(-1);
    expect(fold).toMatchObject({
      action: 'proposal.revisions_pruned',
      data: {
        revisions: [
          { revision_id: a2.revision_id, number: 2 },
          { revision_id: a3.revision_id, number: 3 },
        ],
      },
    });
    expect(m.store.audit.verify().ok).toBe(true);
    // The database refuses it too: reviews and tasks reference the revisions that must stay.
    expect(() => m.store.proposals.deleteRevision(c.revision_id)).toThrow(/FOREIGN KEY/);
    expect(() => m.store.proposals.deleteRevision(a1.revision_id)).toThrow(/FOREIGN KEY/);
    // A second run finds nothing more.
    expect(await m.master.pruning.run()).toEqual({ proposals: 0, revisions: 0 });
  });
});
