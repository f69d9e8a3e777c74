import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TimeBudget, TurnGate } from '../../../../src/broker/fair-share.js';
import { isInspected } from '../../../../src/broker/inspection-memo.js';
import { brokerTools } from '../../../../src/broker/tools/catalog.js';
import { type BoundTool, invokeTool } from '../../../../src/broker/tools/dispatch.js';
import { MAX_PAGE_BYTES } from '../../../../src/broker/tools/paging.js';
import { inspectionSteps } from '../../../../src/broker/tools/proposals.js';
import { costSharesOf } from '../../../../src/broker/tools/tool-cost.js';
import type { BrokerError } from '../../../../src/contracts/errors.js';
import { TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import type { MasterConfigInput } from '../../../../src/platform/config.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { validSpec } from '../../../support/spec.js';

// docs/security.md "Fair share between principals": one principal cannot starve others through the tools. Each flood of the issue as
// behaviour: the cost every tool declares, the per-principal waits and heavy budget, the pending grant
// request quota (nothing written when refused), pages bounded in bytes, and the review queue taking
// owners in turn.

const tools = new Map<string, BoundTool>(brokerTools().map((t) => [t.def.name, t]));
let f: BrokerFixture;
let alice: Principal;
let bob: Principal;
let rita: Principal;
let n = 0;
const key = () => `k${++n}`;
const failure = async (p: Promise<unknown>) =>
  (await p.then(
    () => null,
    (e: unknown) => e,
  )) as BrokerError;

function setup(config: MasterConfigInput = {}) {
  f = makeBrokerDeps({
    config: { policy: { scripts: [{ interpreter: '/bin/sh', script_from_inputs: true }] }, ...config },
  });
  alice = f.principal('alice', ['submitter']);
  bob = f.principal('bob', ['submitter']);
  rita = f.principal('rita', ['reviewer']);
}

const call = (who: Principal, tool: string, input: Record<string, unknown>, signal?: AbortSignal) =>
  invokeTool(tools.get(tool)!, { deps: f.deps, principal: who, signal }, input);

async function draft(who: Principal, title = 't') {
  return (await f.invoke(who, 'create_proposal', {
    spec: validSpec({ title }),
    idempotency_key: key(),
  })) as { proposal_id: string; revision_id: string };
}

async function inReview(who: Principal, title: string) {
  const p = await draft(who, title);
  await f.invoke(who, 'confirm_revision', { ...ids(p), idempotency_key: key() });
  return p.proposal_id;
}

/** A revision of alice's that a reviewer approved: the base of her grant requests. */
async function approvedBase(): Promise<string> {
  const up = (await f.invoke(alice, 'upload_inputs', {
    files: [{ path: 'run.sh', content: 'echo 1' }],
    idempotency_key: key(),
  })) as { inputs: Array<{ path: string; sha256: string; size: number }> };
  const p = (await f.invoke(alice, 'create_proposal', {
    spec: validSpec({ runtime: { kind: 'process', argv: ['/bin/sh', 'run.sh'] }, inputs: up.inputs }),
    idempotency_key: key(),
  })) as { proposal_id: string; revision_id: string; digest: string };
  await f.invoke(alice, 'confirm_revision', { ...ids(p), idempotency_key: key() });
  await f.invoke(rita, 'submit_review', {
    ...ids(p),
    decision: 'APPROVE',
    comments: 'ok',
    idempotency_key: key(),
  });
  return p.revision_id;
}

const ids = (p: { proposal_id: string; revision_id: string }) => ({
  proposal_id: p.proposal_id,
  revision_id: p.revision_id,
});

const grantRequest = (base: string, env: unknown[] = []) => ({
  base_revision_id: base,
  scope: { env },
  max_runs: 3,
  max_card_hours: 1,
  ttl_seconds: 3600,
  reason: 'iterate',
  idempotency_key: key(),
});

/** Env rules of about `bytes` bytes in all (values of 1 KiB). */
const bigEnv = (bytes: number) =>
  Array.from({ length: Math.ceil(bytes / (16 * 1024)) }, (_, i) => ({
    name: `V${i}`,
    values: Array.from({ length: 16 }, (_, j) => `${j}`.padEnd(1000, 'x')),
  }));

afterEach(() => f.close());

describe('the catalog', () => {
  beforeEach(() => setup());

  it('names a cost for every tool; the read-heavy ones are heavy, the long-polls wait', () => {
    for (const t of tools.values()) expect(['light', 'heavy', 'wait']).toContain(t.cost);
    const heavy = [
      'explain_grant',
      'get_revision',
      'get_review_prompt',
      'get_input',
      'get_task_logs',
      'get_task_outputs',
      'list_grants',
      'get_grant',
      'list_review_queue',
      'list_proposals',
      'list_tasks',
      'create_proposal',
      'revise_proposal',
    ];
    for (const name of heavy) expect(tools.get(name)?.cost, name).toBe('heavy');
    expect(tools.get('wait_for_task')?.cost).toBe('wait');
    expect(tools.get('wait_for_proposal')?.cost).toBe('wait');
  });
});

describe('long-polls per principal', () => {
  beforeEach(() => setup({ quotas: { waits_per_principal: 2 } }));

  it("a principal's next wait past its cap is QUOTA_EXCEEDED at once; another principal still waits", async () => {
    const mine = { proposal_id: await inReview(alice, 'a') };
    const stop = new AbortController();
    const held = [1, 2].map(() =>
      call(alice, 'wait_for_proposal', { proposal_id: mine.proposal_id, timeout_seconds: 25 }, stop.signal),
    );
    await new Promise((r) => setImmediate(r));
    expect(costSharesOf(f.deps).waits.heldBy(alice.id)).toBe(2);
    const third = await failure(
      call(alice, 'wait_for_proposal', { proposal_id: mine.proposal_id, timeout_seconds: 25 }),
    );
    expect(third.code).toBe('QUOTA_EXCEEDED');
    expect(third.details).toMatchObject({ cap: 'quotas.waits_per_principal', limit: 2, used: 2 });
    // bob's own wait is not refused (it answers at once: timeout 0).
    const his = await inReview(bob, 'b');
    await expect(
      call(bob, 'wait_for_proposal', { proposal_id: his, timeout_seconds: 0 }),
    ).resolves.toMatchObject({ timed_out: true });
    stop.abort();
    await Promise.all(held);
    expect(costSharesOf(f.deps).waits.heldBy(alice.id)).toBe(0);
    await expect(
      call(alice, 'wait_for_proposal', { proposal_id: mine.proposal_id, timeout_seconds: 0 }),
    ).resolves.toMatchObject({ timed_out: true });
  });
});

describe('heavy calls per principal', () => {
  beforeEach(() => setup({ quotas: { heavy_ms_per_second: 10, heavy_burst_ms: 50 } }));

  it('a principal over its time budget waits for its turn; another principal is answered meanwhile', async () => {
    await draft(alice);
    // alice spent far more than her burst: her next heavy call must wait ~10 s.
    costSharesOf(f.deps).budget.charge(alice.id, 100, performance.now());
    const stop = new AbortController();
    let aliceDone = false;
    const hers = call(alice, 'list_proposals', {}, stop.signal).finally(() => {
      aliceDone = true;
    });
    await expect(call(bob, 'list_proposals', {})).resolves.toMatchObject({ next_cursor: null });
    expect(aliceDone).toBe(false);
    // Her client goes away: nothing ran, typed.
    stop.abort();
    expect((await failure(hers)).code).toBe('UNAVAILABLE');
  });

  it('the budget is a token bucket of milliseconds', () => {
    const b = new TimeBudget(100, 200);
    expect(b.delay('a', 0)).toBe(0);
    b.charge('a', 500, 0); // level 200 - 500 = -300
    expect(b.delay('a', 0)).toBe(3010);
    expect(b.delay('a', 3010)).toBe(0);
    expect(b.delay('b', 0)).toBe(0);
    b.sweep(10_000);
    expect(b.delay('a', 10_000)).toBe(0);
  });
});

describe('the turn gate of heavy parts', () => {
  const busy = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };

  it("runs one part per turn, principals in turn, and rests a principal as long as its part ran while another's parts go on", async () => {
    // Parts "run" on a clock they move on (with real time beneath it), not by spinning the CPU: how busy
    // the machine is changes nothing below. alice's parts are long next to any timer's lateness.
    let offset = 0;
    const now = () => performance.now() + offset;
    const gate = new TurnGate(now);
    const ran: Array<{ who: string; start: number; end: number }> = [];
    const part = (principal: string, who: string, ms: number) =>
      gate.run(principal, () => {
        const start = now();
        offset += ms;
        ran.push({ who, start, end: now() });
        return who;
      });
    // alice queues three 200 ms parts, then bob two 1 ms parts, all before the first runs.
    const parts = [
      part('alice', 'a1', 200),
      part('alice', 'a2', 200),
      part('alice', 'a3', 200),
      part('bob', 'b1', 1),
      part('bob', 'b2', 1),
    ];
    expect(ran).toEqual([]); // nothing runs in the caller's turn
    expect(await Promise.all(parts)).toEqual(['a1', 'a2', 'a3', 'b1', 'b2']);
    const order = ran.map((r) => r.who);
    const t = Object.fromEntries(ran.map((r) => [r.who, r]));
    // bob's first part comes right after alice's first, and both of his run in her rest.
    expect(order).toEqual(['a1', 'b1', 'b2', 'a2', 'a3']);
    // alice's next part waits at least as long as her last one ran (a timer may fire 1 ms early).
    expect(t['a2']!.start - t['a1']!.end).toBeGreaterThanOrEqual(t['a1']!.end - t['a1']!.start - 1);
    expect(t['a3']!.start - t['a2']!.end).toBeGreaterThanOrEqual(t['a2']!.end - t['a2']!.start - 1);
  });

  it('a part of a principal that is not resting runs at once, even while another principal’s rest holds a timer', async () => {
    const gate = new TurnGate();
    await gate.run('alice', () => busy(30));
    // alice rests ~30 ms: her next part waits on a timer...
    const hers = gate.run('alice', () => performance.now());
    await new Promise((r) => setImmediate(r));
    // ...and bob's, asked for meanwhile, does not wait for it.
    const bobs = await gate.run('bob', () => performance.now());
    // Bob runs before alice's part: he did not wait for her rest's timer.
    expect(bobs).toBeLessThan(await hers);
  });

  it('a principal whose lane emptied still rests before its next part', async () => {
    const gate = new TurnGate();
    let end = 0;
    await gate.run('alice', () => {
      busy(15);
      end = performance.now();
    });
    const order: string[] = [];
    const [start] = await Promise.all([
      gate.run('alice', () => {
        order.push('alice');
        return performance.now();
      }),
      gate.run('bob', () => order.push('bob')),
    ]);
    expect(start - end).toBeGreaterThanOrEqual(14);
    // bob never rested: his part, asked for after hers, runs first.
    expect(order).toEqual(['bob', 'alice']);
  });
});

describe('a spec naming new inputs', () => {
  beforeEach(() => setup());

  it('is inspected one input per part before the handler, and not again once remembered', async () => {
    const files = Array.from({ length: 3 }, (_, i) => ({
      path: `data/part${i}.txt`,
      content: `line ${i}\n`.repeat(1000),
    }));
    const up = (await f.invoke(alice, 'upload_inputs', { files, idempotency_key: key() })) as {
      inputs: Array<{ path: string; sha256: string; size: number }>;
    };
    const spec = TaskSpecSchema.parse(validSpec({ inputs: up.inputs }));
    const steps = inspectionSteps(f.deps, alice.id, spec);
    expect(steps).toHaveLength(3);
    expect(up.inputs.every((i) => !isInspected(f.deps, alice.id, i.sha256, i.path))).toBe(true);
    // Through the dispatcher: explain_grant with the spec runs them (as parts of the TurnGate) first.
    await call(alice, 'explain_grant', { spec: validSpec({ inputs: up.inputs }) });
    expect(up.inputs.every((i) => isInspected(f.deps, alice.id, i.sha256, i.path))).toBe(true);
    expect(inspectionSteps(f.deps, alice.id, spec)).toHaveLength(0);
    // Remembered per owner: bob naming the same bytes has them inspected for him.
    expect(inspectionSteps(f.deps, bob.id, spec)).toHaveLength(0); // not his uploads: nothing to inspect
  });
});

describe('pending grant requests per principal', () => {
  beforeEach(() =>
    setup({ quotas: { max_pending_grant_requests: 3, max_pending_grant_request_bytes: 256 * 1024 } }),
  );

  it('the request past the cap is QUOTA_EXCEEDED and writes nothing; a withdrawn one frees a place', async () => {
    const base = await approvedBase();
    const made: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = (await f.invoke(alice, 'request_grant', grantRequest(base))) as {
        grant: { grant_id: string };
      };
      made.push(r.grant.grant_id);
    }
    const auditBefore = f.deps.store.audit.verify().events;
    const err = await failure(f.invoke(alice, 'request_grant', grantRequest(base)));
    expect(err.code).toBe('QUOTA_EXCEEDED');
    expect(err.hint).toMatch(/revoke_grant/);
    expect(err.details).toMatchObject({ cap: 'quotas.max_pending_grant_requests', limit: 3, used: 3 });
    expect(f.deps.store.grants.pendingRequestedBy(alice.id).count).toBe(3);
    expect(f.deps.store.audit.verify().events).toBe(auditBefore);
    await f.invoke(alice, 'revoke_grant', { grant_id: made[0], idempotency_key: key() });
    await expect(f.invoke(alice, 'request_grant', grantRequest(base))).resolves.toBeTruthy();
  });

  it('their bytes are capped too: a request whose scope would pass it is refused', async () => {
    const base = await approvedBase();
    await f.invoke(alice, 'request_grant', grantRequest(base, bigEnv(160 * 1024)));
    const err = await failure(f.invoke(alice, 'request_grant', grantRequest(base, bigEnv(160 * 1024))));
    expect(err.code).toBe('QUOTA_EXCEEDED');
    expect(err.details).toMatchObject({ cap: 'quotas.max_pending_grant_request_bytes' });
    expect(f.deps.store.grants.pendingRequestedBy(alice.id).count).toBe(1);
  });
});

describe('pages', () => {
  beforeEach(() =>
    setup({ quotas: { max_pending_grant_requests: 100, max_pending_grant_request_bytes: null } }),
  );

  it('a page of grants stops at MAX_PAGE_BYTES; the cursor reaches every grant once', async () => {
    const base = await approvedBase();
    for (let i = 0; i < 6; i++)
      await f.invoke(alice, 'request_grant', grantRequest(base, bigEnv(300 * 1024)));
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page = (await f.invoke(rita, 'list_grants', {
        limit: 200,
        ...(cursor ? { cursor } : {}),
      })) as { grants: Array<{ grant_id: string }>; next_cursor: string | null };
      expect(Buffer.byteLength(JSON.stringify(page.grants))).toBeLessThanOrEqual(MAX_PAGE_BYTES);
      seen.push(...page.grants.map((g) => g.grant_id));
      cursor = page.next_cursor;
      pages++;
    } while (cursor !== null);
    expect(pages).toBeGreaterThan(1);
    expect(new Set(seen).size).toBe(6);
    expect(seen.length).toBe(6);
  });
});

describe('the review queue', () => {
  beforeEach(() => setup());

  it('takes owners in turn: one owner’s many proposals never stand before another’s first', async () => {
    for (let i = 1; i <= 5; i++) await inReview(alice, `a${i}`);
    await inReview(bob, 'b1');
    await inReview(bob, 'b2');
    const title = async (limit: number) => {
      const out: string[] = [];
      let cursor: string | null = null;
      do {
        const q = (await f.invoke(rita, 'list_review_queue', {
          limit,
          ...(cursor ? { cursor } : {}),
        })) as { items: Array<{ title: string }>; next_cursor: string | null };
        out.push(...q.items.map((i) => i.title));
        cursor = q.next_cursor;
      } while (cursor !== null);
      return out;
    };
    const order = ['a1', 'b1', 'a2', 'b2', 'a3', 'a4', 'a5'];
    expect(await title(50)).toEqual(order);
    expect(await title(2)).toEqual(order);
    expect((await failure(f.invoke(rita, 'list_review_queue', { cursor: 'prp_x' }))).code).toBe(
      'INVALID_INPUT',
    );
  });
});
