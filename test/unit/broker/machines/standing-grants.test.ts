import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sweepGrants } from '../../../../src/broker/loops/grant-sweep.js';
import { settleGrantRun } from '../../../../src/broker/machines/standing-grant.js';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import type { BrokerError } from '../../../../src/contracts/errors.js';
import type { ManualClock } from '../../../../src/platform/clock.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { validSpec } from '../../../support/spec.js';

// Standing grants through the dispatcher on a real SQLite store: request, decide (never by the
// grantee), auto-approval at confirm with its receipt, exact budgets, revocation, expiry, immutability.

let f: BrokerFixture;
let alice: Principal;
let rita: Principal;
let n = 0;
const key = () => `k${++n}`;

const code = async (p: Promise<unknown>) => ((await p.catch((e: unknown) => e)) as BrokerError).code;

async function upload(text: string) {
  const r = (await f.invoke(alice, 'upload_inputs', {
    files: [{ path: 'run.sh', content: text }],
    idempotency_key: key(),
  })) as { inputs: Array<{ path: string; sha256: string; size: number }> };
  return r.inputs;
}

async function propose(text: string, over: Record<string, unknown> = {}): Promise<RevisionResult> {
  const inputs = await upload(text);
  return (await f.invoke(alice, 'create_proposal', {
    spec: validSpec({
      runtime: { kind: 'process', argv: ['/bin/sh', 'run.sh', '1'] },
      inputs,
      ...over,
    }),
    idempotency_key: key(),
  })) as RevisionResult;
}

type Confirmed = {
  state: string;
  task_id: string | null;
  grant?: { covered: boolean; grant_id: string | null; failing: { clause: string; message: string } | null };
};
const confirm = (r: RevisionResult) =>
  f.invoke(alice, 'confirm_revision', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    idempotency_key: key(),
  }) as Promise<Confirmed>;

/** A reviewed, approved first run, and a grant from it decided by rita. */
async function activeGrant(over: Record<string, unknown> = {}) {
  const first = await propose('echo 1');
  await confirm(first);
  await f.invoke(rita, 'submit_review', {
    proposal_id: first.proposal_id,
    revision_id: first.revision_id,
    decision: 'APPROVE',
    comments: 'ok',
    idempotency_key: key(),
  });
  const req = (await f.invoke(alice, 'request_grant', {
    base_revision_id: first.revision_id,
    scope: { mutable_inputs: ['run.sh'] },
    max_runs: 5,
    max_card_hours: 1,
    concurrency: 10,
    ttl_seconds: 3600,
    reason: 'iterate on run.sh',
    idempotency_key: key(),
    ...over,
  })) as { grant: { grant_id: string; state: string } };
  expect(req.grant.state).toBe('REQUESTED');
  const id = req.grant.grant_id;
  expect(
    await code(
      f.invoke(alice, 'decide_grant', { grant_id: id, decision: 'APPROVE', idempotency_key: key() }),
    ),
  ).toBe('SELF_GRANT_FORBIDDEN');
  await f.invoke(rita, 'decide_grant', { grant_id: id, decision: 'APPROVE', idempotency_key: key() });
  return id;
}

beforeEach(() => {
  f = makeBrokerDeps({
    config: {
      policy: { scripts: [{ interpreter: '/bin/sh', script_from_inputs: true }] },
      grants: { max_ttl_seconds: 7200 },
    },
  });
  // alice may also review (others' work): the self-grant refusal is about who she is, not her role.
  alice = f.principal('alice', ['submitter', 'reviewer']);
  rita = f.principal('rita', ['reviewer']);
});

afterEach(() => f.close());

describe('standing grants', () => {
  it('auto-approves a covered revision at confirm, with a review row naming the grant and a receipt', async () => {
    const id = await activeGrant();
    const next = await propose('echo 2');
    const c = await confirm(next);
    expect(c).toMatchObject({ state: 'APPROVED', grant: { covered: true, grant_id: id } });
    expect(f.deps.store.tasks.get(c.task_id!)?.state).toBe('QUEUED');
    const [review] = f.deps.store.proposals.reviews(next.proposal_id) as unknown as Array<{
      grant_id: string;
      reviewer_id: string;
    }>;
    expect(review).toMatchObject({ grant_id: id, reviewer_id: rita.id });
    const audit = f.deps.store.audit
      .forSubject('proposal', next.proposal_id)
      .find((e) => e.action === 'review.auto_approved');
    expect(audit?.data).toMatchObject({ grant_id: id, approved_by: `grant ${id}` });
    const got = (await f.invoke(rita, 'get_grant', { grant_id: id })) as {
      grant: { budget: { runs_used: number; running: number } };
      runs: Array<{
        receipt: { budget_before: { runs_used: number } };
        diff_against_base: Array<{ path: string }>;
      }>;
    };
    expect(got.grant.budget).toMatchObject({ runs_used: 1, running: 1 });
    expect(got.runs[0]!.receipt.budget_before.runs_used).toBe(0);
    expect(got.runs[0]!.diff_against_base.map((d) => d.path)).toContain('run.sh');
    const listed = (await f.invoke(alice, 'list_grants', { state: 'ACTIVE' })) as { grants: unknown[] };
    expect(listed.grants).toHaveLength(1);
    const bob = f.principal('bob', ['submitter']);
    expect(((await f.invoke(bob, 'list_grants', {})) as { grants: unknown[] }).grants).toEqual([]);
  });

  it('leaves a revision outside the scope IN_REVIEW and names the first failing clause', async () => {
    await activeGrant();
    const c = await confirm(await propose('echo 3', { cards: { count: 2 } }));
    expect(c.state).toBe('IN_REVIEW');
    expect(c.grant?.failing).toEqual({ clause: 'cards', message: 'cards 2 > 1' });
    const sh = await confirm(
      await propose('echo 4', { runtime: { kind: 'process', argv: ['/bin/sh', '-c', 'echo hi'] } }),
    );
    expect(sh.grant?.failing?.clause).toBe('argv');
    const explained = (await f.invoke(alice, 'explain_grant', {
      spec: validSpec({ cards: { count: 8 } }),
    })) as { results: Array<{ failing: { clause: string } | null }> };
    expect(explained.results[0]?.failing?.clause).toBeDefined();
  });

  it('max_runs is exact under ten confirms at once', async () => {
    await activeGrant({ max_runs: 3 });
    const revisions = await Promise.all(Array.from({ length: 10 }, (_, i) => propose(`echo ${i + 10}`)));
    const results = await Promise.all(revisions.map(confirm));
    expect(results.filter((r) => r.state === 'APPROVED')).toHaveLength(3);
    expect(results.filter((r) => r.grant?.failing?.clause === 'runs')).toHaveLength(7);
  });

  it('card-hours are reserved at approval and settled from the task’s end', async () => {
    const id = await activeGrant({ max_card_hours: 60 / 3600 + 0.0001 });
    const c = await confirm(await propose('echo 5'));
    expect(c.state).toBe('APPROVED');
    // 1 card × 60 s reserved; a second needs 60 more.
    expect((await confirm(await propose('echo 6'))).grant?.failing?.clause).toBe('card_hours');
    await f.invoke(alice, 'cancel_task', { task_id: c.task_id, idempotency_key: key() });
    const g = f.deps.store.grants.get(id)!;
    expect(g).toMatchObject({ running: 0, card_seconds_reserved: 0, card_seconds_charged: 0 });
    expect(f.deps.store.grants.runOfTask(c.task_id!)).toMatchObject({
      outcome: 'CANCELLED',
      card_seconds_charged: 0,
    });
    expect((await confirm(await propose('echo 7'))).state).toBe('APPROVED');
  });

  it('revocation stops the next run at once and cancels queued ones when asked', async () => {
    const id = await activeGrant();
    const c = await confirm(await propose('echo 8'));
    const revoked = (await f.invoke(rita, 'revoke_grant', {
      grant_id: id,
      cancel_running: true,
      idempotency_key: key(),
    })) as { grant: { state: string }; cancelled_task_ids: string[] };
    expect(revoked).toMatchObject({ grant: { state: 'REVOKED' }, cancelled_task_ids: [c.task_id] });
    expect(f.deps.store.tasks.get(c.task_id!)?.state).toBe('CANCELLED');
    expect((await confirm(await propose('echo 9'))).state).toBe('IN_REVIEW');
    const bob = f.principal('bob', ['submitter']);
    expect(await code(f.invoke(bob, 'revoke_grant', { grant_id: id, idempotency_key: key() }))).toBe(
      'NOT_FOUND',
    );
  });

  it('a grant never widens itself: immutable in the database, a superseding request needs another reviewer', async () => {
    const id = await activeGrant();
    expect(() =>
      f.deps.store.db.prepare('UPDATE standing_grants SET max_runs = 999 WHERE id = ?').run(id),
    ).toThrow(/immutable/);
    const base = f.deps.store.grants.get(id)!.base_revision_id;
    const wider = (await f.invoke(alice, 'request_grant', {
      base_revision_id: base,
      scope: { mutable_inputs: ['**'], max_cards: 8 },
      max_runs: 100,
      max_card_hours: 100,
      ttl_seconds: 3600,
      reason: 'more',
      supersedes: id,
      idempotency_key: key(),
    })) as { grant: { grant_id: string } };
    expect(
      await code(
        f.invoke(alice, 'decide_grant', {
          grant_id: wider.grant.grant_id,
          decision: 'APPROVE',
          idempotency_key: key(),
        }),
      ),
    ).toBe('SELF_GRANT_FORBIDDEN');
    expect((await confirm(await propose('echo 10', { cards: { count: 8 } }))).state).toBe('IN_REVIEW');
    // A scope that pins nothing is refused outright.
    expect(
      await code(
        f.invoke(alice, 'request_grant', {
          base_revision_id: base,
          scope: { argv_prefix: ['/bin/sh', '-c'] },
          max_runs: 1,
          max_card_hours: 1,
          ttl_seconds: 60,
          reason: 'x',
          idempotency_key: key(),
        }),
      ),
    ).toBe('INVALID_INPUT');
  });

  it('expires at the operator’s cap, whatever the request asked', async () => {
    const id = await activeGrant({ ttl_seconds: 30 * 86400 });
    const g = f.deps.store.grants.get(id)!;
    expect(g.expires_at - g.created_at).toBe(7200 * 1000);
    (f.clock as ManualClock).advance(7200 * 1000);
    expect((await confirm(await propose('echo 11'))).grant?.failing?.clause).toBe('expiry');
    expect(sweepGrants(f.deps)).toBe(1);
    expect(f.deps.store.grants.get(id)?.state).toBe('EXPIRED');
  });

  it('max_card_hours is exact under ten confirms at once', async () => {
    // Each run reserves 1 card × 60 s; the budget holds exactly two.
    await activeGrant({ max_runs: 100, max_card_hours: 120 / 3600 });
    const revisions = await Promise.all(Array.from({ length: 10 }, (_, i) => propose(`echo h${i}`)));
    const results = await Promise.all(revisions.map(confirm));
    expect(results.filter((r) => r.state === 'APPROVED')).toHaveLength(2);
    expect(results.filter((r) => r.grant?.failing?.clause === 'card_hours')).toHaveLength(8);
  });

  it('charges a finished run cards × seconds held; k failures in a row suspend it; alerts at 80 % once', async () => {
    const id = await activeGrant({ max_runs: 5, breaker_k: 2 });
    const ended = async (state: 'FAILED' | 'COMPLETED', seconds: number) => {
      const c = await confirm(await propose(`echo ${state}${seconds}${n}`));
      const t = f.deps.store.tasks.get(c.task_id!)!;
      // The end as moveTask writes it, settled as moveTask settles it (no worker in this fixture).
      f.deps.store.transaction(() =>
        settleGrantRun(f.deps, { ...t, state, started_at: 1000, finished_at: 1000 + seconds * 1000 }),
      );
      return c.task_id!;
    };
    const first = await ended('FAILED', 12.5);
    expect(f.deps.store.grants.runOfTask(first)).toMatchObject({
      card_seconds_charged: 13,
      outcome: 'FAILED',
    });
    await ended('COMPLETED', 1);
    expect(f.deps.store.grants.get(id)).toMatchObject({ consecutive_failures: 0, card_seconds_charged: 14 });
    await ended('FAILED', 1);
    const fourth = await ended('FAILED', 1);
    expect(f.deps.store.grants.get(id)?.state).toBe('SUSPENDED');
    expect((await confirm(await propose('echo after'))).grant?.failing?.clause).toBe('state');
    // runs 4/5 passed 80 % once: one alert row.
    const alerts = f.deps.store.audit
      .forSubject('standing_grant', id)
      .filter((e) => e.action === 'standing_grant.budget_alert');
    expect(alerts.map((e) => (e.data as { budget: string }).budget)).toEqual(['runs']);
    const status = (await f.invoke(alice, 'get_status', {})) as {
      alerts: Array<{ kind: string; message: string }>;
    };
    expect(status.alerts.find((a) => a.kind === 'standing_grant_budget')?.message).toMatch(/SUSPENDED/);
    const bob = f.principal('bob', ['submitter']);
    const bobs = (await f.invoke(bob, 'get_status', {})) as { alerts: Array<{ kind: string }> };
    expect(bobs.alerts.filter((a) => a.kind === 'standing_grant_budget')).toEqual([]);
    // Settling twice changes nothing.
    const before = f.deps.store.grants.get(id);
    const t = f.deps.store.tasks.get(fourth)!;
    f.deps.store.transaction(() =>
      settleGrantRun(f.deps, { ...t, state: 'FAILED', started_at: 0, finished_at: 9e6 }),
    );
    expect(f.deps.store.grants.get(id)).toEqual(before);
  });
});
