import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { EvidenceDocument } from '../../../qualification/verify/evidence.js';
import { moveQualificationRun } from '../../../src/broker/machines/qualification-run.js';
import {
  cancelInterruptedRuns,
  finishRun,
  runCordonReason,
} from '../../../src/broker/tools/qualification.js';
import { BrokerError } from '../../../src/contracts/errors.js';
import type { QualificationRunView } from '../../../src/contracts/tools-qualification.js';
import type { ManualClock } from '../../../src/platform/clock.js';
import type { Principal } from '../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';

/**
 * start_qualification and the end of a run, on a real in-memory store through the dispatcher: what is
 * validated, what the run reserves and cordons, what only the background runner receives (the tokens),
 * and what happens to the cards for each outcome.
 */

let f: BrokerFixture;
let op: Principal;
let launched: Array<{ runId: string; tokens: { submitter: string; reviewer: string } }>;

const WORKER = 'gpu-host-1';

function enrol(cards: number, online = true): void {
  const now = f.clock.now();
  const samples = Array.from({ length: cards }, (_, index) => ({
    index,
    uuid: `SIM-${index}`,
    model: 'Simulated GPU',
    memory_used_mib: 0,
    memory_total_mib: 81920,
    utilization_pct: 0,
    temperature_c: 30,
    power_w: 50,
    health: 'ok' as const,
    health_reasons: [],
    processes: [],
    simulated: true,
  }));
  f.deps.store.workers.upsertOnHello(
    {
      id: WORKER,
      hostname: 'host',
      provider: 'sim',
      version: '0',
      boot_id: 'b1',
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
  if (online) f.deps.cluster.fleet.connected(WORKER, 'b1', samples, now);
}

const start = (input: Record<string, unknown>, who: Principal = op) =>
  f.invoke(who, 'start_qualification', {
    worker_id: WORKER,
    idempotency_key: 'k1',
    ...input,
  }) as Promise<QualificationRunView>;

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'OK';
  } catch (err) {
    if (err instanceof BrokerError) return err.code;
    throw err;
  }
}

beforeEach(() => {
  f = makeBrokerDeps();
  op = f.principal('ops', ['operator']);
  launched = [];
  f.deps.qualification = {
    assertReady: () => undefined,
    launch: (runId, tokens) => launched.push({ runId, tokens }),
    cancel: () => false,
  };
});

afterEach(() => f.close());

describe('start_qualification', () => {
  it('reserves and cordons the lowest usable cards, skips counts the worker cannot hold, hands tokens only to the runner', async () => {
    enrol(4);
    f.deps.store.workers.cordon({
      worker_id: WORKER,
      card_index: 1,
      reason: 'bad fan',
      actor: 'ops',
      created_at: 0,
    });
    const v = await start({});
    expect(v).toMatchObject({
      state: 'RUNNING',
      submitter: 'scripted',
      requested: [1, 2, 4, 8],
      ladder: [1, 2],
      reserved_cards: [0, 2],
      verdict: null,
      evidence: null,
    });
    expect(v.skipped).toEqual([
      { cards: 4, reason: `worker ${WORKER} has 3 usable card(s) (4 in all, 1 cordoned, 0 quarantined)` },
      { cards: 8, reason: `worker ${WORKER} has 3 usable card(s) (4 in all, 1 cordoned, 0 quarantined)` },
    ]);
    expect(v.submitter_principal).toBe(`qual-submitter-${v.run_id}`);
    expect(v.reviewer_principal).toBe(`qual-reviewer-${v.run_id}`);
    const cordons = f.deps.store.workers.cordons();
    expect(cordons.map((c) => [c.card_index, c.reason])).toEqual([
      [0, runCordonReason(v.run_id)],
      [1, 'bad fan'],
      [2, runCordonReason(v.run_id)],
    ]);
    expect(launched).toHaveLength(1);
    expect(launched[0]?.runId).toBe(v.run_id);
    expect(launched[0]?.tokens.submitter).toMatch(/^gpb_/);
    expect(launched[0]?.tokens.submitter).not.toBe(launched[0]?.tokens.reviewer);
    expect(JSON.stringify(v)).not.toContain('gpb_');
    const run = f.deps.store.qualifications.get(v.run_id)!;
    expect(run.submitter_id).not.toBe(run.reviewer_id);

    // A replay returns the same run and launches nothing more.
    expect((await start({})).run_id).toBe(v.run_id);
    expect(launched).toHaveLength(1);
  });

  it('refuses what cannot run', async () => {
    expect(await code(start({}))).toBe('NOT_FOUND');
    enrol(2, false);
    expect(await code(start({ idempotency_key: 'k2' }))).toBe('INVALID_STATE');
    enrol(2);
    expect(await code(start({ idempotency_key: 'k3' }, f.principal('rita', ['reviewer'])))).toBe('FORBIDDEN');
    expect(await code(start({ idempotency_key: 'k4', cards: [0] }))).toBe('INVALID_INPUT');
    expect(await code(start({ idempotency_key: 'k5' }))).toBe('OK');
    expect(await code(start({ idempotency_key: 'k6' }))).toBe('CONFLICT');
    delete f.deps.qualification;
    expect(await code(start({ idempotency_key: 'k7' }))).toBe('UNAVAILABLE');
  });
});

describe('the end of a run', () => {
  const evidence = (verdict: EvidenceDocument['verdict']) =>
    ({ verdict, digest: 'a'.repeat(64), run_id: 'x' }) as unknown as EvidenceDocument;

  it('PASSED returns the run’s cards (and only them) and revokes the run’s principals', async () => {
    enrol(4);
    f.deps.store.workers.cordon({
      worker_id: WORKER,
      card_index: 3,
      reason: 'bad fan',
      actor: 'ops',
      created_at: 0,
    });
    const v = await start({ cards: [1, 2] });
    finishRun(f.deps, v.run_id, { evidence: evidence('PASSED') });
    const run = f.deps.store.qualifications.get(v.run_id)!;
    expect(run).toMatchObject({ state: 'PASSED', digest: 'a'.repeat(64) });
    expect(f.deps.store.workers.cordons().map((c) => c.card_index)).toEqual([3]);
    for (const id of [run.submitter_id, run.reviewer_id])
      expect(f.deps.store.principals.findById(id)?.revoked_at).not.toBeNull();
    // Finishing twice changes nothing.
    finishRun(f.deps, v.run_id, { evidence: evidence('FAILED') });
    expect(f.deps.store.qualifications.get(v.run_id)?.state).toBe('PASSED');
  });

  it('FAILED and INCONCLUSIVE keep the cards cordoned, saying why', async () => {
    enrol(2);
    const v = await start({ cards: [2] });
    finishRun(f.deps, v.run_id, { evidence: evidence('FAILED') });
    const cordons = f.deps.store.workers.cordons();
    expect(cordons.map((c) => c.card_index)).toEqual([0, 1]);
    expect(cordons[0]?.reason).toBe(
      `qualification run ${v.run_id} ended FAILED; uncordon once the host is checked`,
    );
  });

  it('a run ends only through its table: one audited move, compare-and-set, nothing after a final state', async () => {
    enrol(2);
    const v = await start({ cards: [1] });
    const running = f.deps.store.qualifications.get(v.run_id)!;
    finishRun(f.deps, v.run_id, { evidence: evidence('INCONCLUSIVE') });
    const moves = f.deps.store.audit
      .forSubject('qualification_run', v.run_id)
      .filter((e) => e.action.startsWith('qualification_run.'));
    expect(moves.map((e) => [e.action, e.actor, e.data])).toEqual([
      [
        'qualification_run.inconclusive',
        'qualification',
        { from: 'RUNNING', to: 'INCONCLUSIVE', worker_id: WORKER, digest: 'a'.repeat(64), detail: null },
      ],
    ]);
    const ended = f.deps.store.qualifications.get(v.run_id)!;
    // A writer holding the run as it was before (RUNNING) loses the compare-and-set.
    expect(() =>
      f.deps.store.transaction(() => moveQualificationRun(f.deps, running, { cancelled: 'stale' }, 'ops')),
    ).toThrow(expect.objectContaining({ code: 'CONFLICT' }));
    // And nothing moves a final run, whoever asks.
    expect(() =>
      f.deps.store.transaction(() =>
        moveQualificationRun(f.deps, ended, { evidence: evidence('PASSED') }, 'ops'),
      ),
    ).toThrow(expect.objectContaining({ code: 'INVALID_STATE' }));
    expect(
      await code(f.invoke(op, 'cancel_qualification', { run_id: v.run_id, idempotency_key: 'c1' })),
    ).toBe('INVALID_STATE');
    expect(f.deps.store.qualifications.get(v.run_id)).toEqual(ended);
    expect(f.deps.store.audit.verify().ok).toBe(true);
  });

  it('a run left RUNNING by a previous master process is CANCELLED at start-up, cards still cordoned', async () => {
    enrol(2);
    const v = await start({ cards: [1] });
    (f.clock as ManualClock).advance(1000);
    expect(cancelInterruptedRuns(f.deps)).toBe(1);
    const run = f.deps.store.qualifications.get(v.run_id)!;
    expect(run).toMatchObject({
      state: 'CANCELLED',
      detail: 'the master restarted during the run',
      evidence: null,
    });
    expect(f.deps.store.workers.cordons().map((c) => c.card_index)).toEqual([0]);
    expect(f.deps.store.audit.verify().ok).toBe(true);
  });
});
