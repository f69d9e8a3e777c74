import { afterEach, describe, expect, it } from 'vitest';
import { migCardIndex } from '../../../src/contracts/sample.js';
import type { QualificationRunView } from '../../../src/contracts/tools-qualification.js';
import type { Principal } from '../../../src/store/principals-repo.js';
import { parseSimMigLayout } from '../../../worker/samplers/sim-mig-layout.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import { type BrokerFixture, makeBrokerDeps } from '../../support/deps.js';

/**
 * start_qualification on a worker with MIG slices (docs/decisions/0046-mig-slices-as-cards.md): a card
 * in MIG mode is never reserved or tested whole; the run reserves one slice per distinct profile for the
 * single-card GEMM rungs, and the view and the audit name them. Samples from the simulated sampler.
 */

let f: BrokerFixture;

const WORKER = 'mig-host';

/** Enrols the worker with `count` simulated cards, the first `split` of them in MIG mode with `layout`. */
async function enrol(count: number, layout: string, split = count): Promise<void> {
  const now = f.clock.now();
  const mig = parseSimMigLayout(layout);
  const withSlices = await new SimSampler({ count, seed: WORKER, mig }).sample();
  const whole = await new SimSampler({ count, seed: WORKER }).sample();
  // Cards below `split` as the MIG sampler has them (parent + slices), the rest whole.
  const samples = withSlices.filter((c) => {
    const parent = c.mig?.parent_index ?? c.index;
    return parent < split;
  });
  for (const c of whole) if (c.index >= split) samples.push(c);
  samples.sort((a, b) => a.index - b.index);
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
        memory_total_mib: s.memory_total_mib,
        simulated: true,
        ...(s.mig ? { mig: { profile: s.mig.profile, compute_slices: s.mig.compute_slices } } : {}),
      })),
    },
    now,
  );
  f.deps.cluster.fleet.connected(WORKER, 'b1', samples, now);
}

function setUp(config: Parameters<typeof makeBrokerDeps>[0] = {}): Principal {
  f = makeBrokerDeps(config);
  f.deps.qualification = { assertReady: () => undefined, launch: () => undefined, cancel: () => false };
  return f.principal('ops', ['operator']);
}

const start = (op: Principal, input: Record<string, unknown> = {}) =>
  f.invoke(op, 'start_qualification', {
    worker_id: WORKER,
    idempotency_key: 'k1',
    ...input,
  }) as Promise<QualificationRunView>;

afterEach(() => f?.close());

describe('start_qualification on a worker with MIG slices', () => {
  it('mixed (card 0 split, cards 1-2 whole): whole cards keep their ladder, one slice per profile is reserved, the parent never', async () => {
    const op = setUp();
    await enrol(3, '3g.40gb+2g.20gb+1g.10gb', 1);
    const v = await start(op);
    expect(v.ladder).toEqual([1, 2]);
    expect(v.slices).toEqual([
      { card: '0:mig:3/0', profile: '1g.10gb' },
      { card: '0:mig:2/0', profile: '2g.20gb' },
      { card: '0:mig:1/0', profile: '3g.40gb' },
    ]);
    expect(v.reserved_cards).toEqual([
      1,
      2,
      migCardIndex(0, 1, 0),
      migCardIndex(0, 2, 0),
      migCardIndex(0, 3, 0),
    ]);
    expect(v.reserved_cards).not.toContain(0);
    expect(v.skipped.map((s) => s.cards)).toEqual([4, 8]);
    expect(v.skipped[0]?.reason).toMatch(
      /^all_reduce is not offered across MIG instances: .*nvidia-smi -i 0 -mig 0/,
    );
    // Each reserved slice is cordoned for the run alone; the parent and the rest of the card are not touched.
    const cordons = f.deps.store.workers.cordons().map((c) => c.card_index);
    expect(cordons.sort((a, b) => a - b)).toEqual(v.reserved_cards);
    const audit = f.deps.store.audit.forSubject('qualification_run', v.run_id)[0];
    expect(audit?.data).toMatchObject({ slices: v.slices });
    expect(v.next_action).toBe(`Running; call get_qualification_run with run_id ${v.run_id} for progress.`);
  });

  it('slices only: the single-card rung runs on the slices and every larger count is skipped with the MIG reason', async () => {
    const op = setUp();
    await enrol(2, '1g.10gb*7');
    const v = await start(op, { cards: [1, 2] });
    expect(v.ladder).toEqual([]);
    expect(v.slices).toEqual([{ card: '0:mig:1/0', profile: '1g.10gb' }]);
    expect(v.reserved_cards).toEqual([migCardIndex(0, 1, 0)]);
    expect(v.skipped).toEqual([
      {
        cards: 2,
        reason:
          'all_reduce is not offered across MIG instances: worker mig-host has 0 usable whole card(s) (2 in all, 0 cordoned, 0 quarantined, 2 in MIG mode); the slices of card(s) 0, 1 get only the single-card GEMM rung (to test 2 cards, take cards out of MIG mode: nvidia-smi -i 0,1 -mig 0 while the worker is drained)',
      },
    ]);
  });

  it('a cordoned parent takes its slices out of the plan; a cordoned slice is passed over for another of its profile', async () => {
    const op = setUp();
    await enrol(2, '1g.10gb*7');
    const cordon = (index: number) =>
      f.deps.store.workers.cordon({
        worker_id: WORKER,
        card_index: index,
        reason: 'ops',
        actor: 'ops',
        created_at: 0,
      });
    cordon(0);
    cordon(migCardIndex(1, 1, 0));
    const v = await start(op, { cards: [1] });
    expect(v.slices).toEqual([{ card: '1:mig:2/0', profile: '1g.10gb' }]);
    expect(v.reserved_cards).toEqual([migCardIndex(1, 2, 0)]);
    expect(v.skipped).toEqual([]);
  });

  it('policy.mig forbid: no slice is reserved and the cards in MIG mode are reported untested', async () => {
    const op = setUp({ config: { policy: { mig: 'forbid' } } });
    await enrol(2, '3g.40gb+2g.20gb+1g.10gb', 1);
    const v = await start(op, { cards: [1] });
    expect(v.ladder).toEqual([1]);
    expect(v.slices).toEqual([]);
    expect(v.reserved_cards).toEqual([1]);
    expect(v.skipped).toEqual([
      {
        cards: 1,
        reason:
          'card(s) 0 in MIG mode cannot be tested: policy.mig is "forbid", so no task may lease their slices (set it to "allow", or cordon those cards)',
      },
    ]);
  });

  it('a reserved slice the worker stops reporting shows with no profile (its rung is then not run)', async () => {
    const op = setUp();
    await enrol(1, '2g.20gb+1g.10gb');
    const v = await start(op, { cards: [1] });
    expect(v.slices.map((r) => r.profile)).toEqual(['1g.10gb', '2g.20gb']);
    // An operator re-partitioned the card: the 1g.10gb instance is gone from the sample and the row.
    const gone = migCardIndex(0, 2, 0);
    const live = f.deps.cluster.fleet.get(WORKER).cards.filter((c) => c.index !== gone);
    f.deps.cluster.fleet.connected(WORKER, 'b1', live, f.clock.now());
    const row = f.deps.store.workers.get(WORKER)!;
    f.deps.store.workers.setCards(
      WORKER,
      row.cards.filter((c) => c.index !== gone),
    );
    const now = (await f.invoke(op, 'get_qualification_run', { run_id: v.run_id })) as QualificationRunView;
    expect(now.slices).toEqual([
      { card: '0:mig:1/0', profile: '2g.20gb' },
      { card: '0:mig:2/0', profile: null },
    ]);
  });
});
