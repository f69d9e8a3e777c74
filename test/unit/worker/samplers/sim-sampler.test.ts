import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CardSampleSchema, cardLabel } from '../../../../src/contracts/sample.js';
import { SamplerError } from '../../../../worker/samplers/card-sampler.js';
import { parseSimMigLayout } from '../../../../worker/samplers/sim-mig-layout.js';
import { SIM_MODEL, SimSampler, simCardUuid, simMigMinors } from '../../../../worker/samplers/sim-sampler.js';
import { writeSimState } from '../../../fixtures/fake-smi.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sim-sampler-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const foreign = { pid: 4242, name: 'python', used_memory_mib: 40_000 };

describe('SimSampler', () => {
  it('gives N idle, healthy, simulated cards', async () => {
    const sample = await new SimSampler({ count: 3, seed: 'w1' }).sample();
    expect(sample.map((card) => card.index)).toEqual([0, 1, 2]);
    for (const card of sample) {
      expect(CardSampleSchema.parse(card)).toEqual(card);
      expect(card).toMatchObject({
        model: SIM_MODEL,
        simulated: true,
        health: 'ok',
        memory_used_mib: 0,
        processes: [],
      });
    }
  });

  it('derives uuids from the seed: stable per seed, different across seeds', async () => {
    const a = await new SimSampler({ count: 2, seed: 'w1' }).sample();
    const b = await new SimSampler({ count: 2, seed: 'w1' }).sample();
    const c = await new SimSampler({ count: 2, seed: 'w2' }).sample();
    expect(a.map((card) => card.uuid)).toEqual(b.map((card) => card.uuid));
    expect(a[0]?.uuid).not.toBe(c[0]?.uuid);
    expect(a[0]?.uuid).not.toBe(a[1]?.uuid);
    expect(simCardUuid('w1', 0)).toMatch(
      /^SIM-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
    );
  });

  it('makes a card busy with setOverride, and idle again with null', async () => {
    const sim = new SimSampler({ count: 2 });
    sim.setOverride(1, { memory_used_mib: 40_000, utilization_pct: 95, processes: [foreign] });
    const busy = await sim.sample();
    expect(busy[1]).toMatchObject({ memory_used_mib: 40_000, utilization_pct: 95, processes: [foreign] });
    expect(busy[0]?.processes).toEqual([]);
    sim.setOverride(1, null);
    expect((await sim.sample())[1]?.memory_used_mib).toBe(0);
  });

  it('reads a state file at every sample; a missing file means idle', async () => {
    const statePath = join(dir, 'sim.json');
    const sim = new SimSampler({ count: 2, statePath });
    expect((await sim.sample())[0]?.health).toBe('ok');
    await writeSimState(statePath, {
      cards: { '0': { health: 'failed', health_reasons: ['test'], processes: [foreign] } },
    });
    expect((await sim.sample())[0]).toMatchObject({
      health: 'failed',
      processes: [foreign],
      simulated: true,
    });
  });

  it('fails with PARSE_FAILED on an invalid state file', async () => {
    const statePath = join(dir, 'sim.json');
    await writeFile(statePath, '{"cards": {"0": {"simulated": false}}}');
    const error = await new SimSampler({ count: 1, statePath }).sample().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SamplerError);
    expect((error as SamplerError).code).toBe('PARSE_FAILED');
  });

  it('refuses a card count outside 1..64', () => {
    expect(() => new SimSampler({ count: 0 })).toThrow(RangeError);
    expect(() => new SimSampler({ count: 65 })).toThrow(RangeError);
  });
});

describe('SimSampler in MIG mode (sim:N:mig=<layout>, ADR 0046)', () => {
  it('reports each card in MIG mode and each instance as a simulated slice of its own', async () => {
    const mig = parseSimMigLayout('3g.40gb+2g.20gb+1g.10gb');
    const sample = await new SimSampler({ count: 2, seed: 'w1', mig }).sample();
    for (const card of sample) expect(CardSampleSchema.parse(card)).toEqual(card);
    expect(sample.map((c) => cardLabel(c.index))).toEqual([
      '0',
      '1',
      '0:mig:1/0',
      '0:mig:2/0',
      '0:mig:3/0',
      '1:mig:1/0',
      '1:mig:2/0',
      '1:mig:3/0',
    ]);
    expect(sample.slice(0, 2).every((c) => c.mig_mode === 'enabled' && c.simulated)).toBe(true);
    const slice = sample[6]!;
    expect(slice).toMatchObject({ simulated: true, model: SIM_MODEL, memory_total_mib: 20091, health: 'ok' });
    expect(slice.uuid).toMatch(/^MIG-SIM-/);
    // As the nvidia sampler reports them: memory per instance, no utilisation (nvidia-smi has none per
    // instance, and [N/A] for a card in MIG mode), no temperature or power per instance.
    expect(slice).toMatchObject({
      memory_used_mib: 0,
      utilization_pct: null,
      temperature_c: null,
      power_w: null,
    });
    expect(sample[1]!.utilization_pct).toBeNull();
    expect(slice.mig).toEqual({
      parent_index: 1,
      parent_uuid: sample[1]!.uuid,
      profile: '2g.20gb',
      gpu_instance_profile: '2g.20gb',
      gpu_instance: 2,
      compute_instance: 0,
      compute_slices: 2,
      gi_access_minor: 3 + 135 + 18,
      ci_access_minor: 3 + 135 + 18 + 1,
      memory_source: 'profile-table',
    });
    expect(simMigMinors(31, 14, 7)).toEqual({ gi: 4314, ci: 4322 });
  });

  it('makes a slice busy through the state file, by its index', async () => {
    const statePath = join(dir, 'sim.json');
    const mig = parseSimMigLayout('1g.10gb*7');
    const sim = new SimSampler({ count: 1, statePath, mig });
    await writeSimState(statePath, { cards: { '264': { processes: [foreign] } } });
    const sample = await sim.sample();
    expect(sample.find((c) => c.index === 264)?.processes).toEqual([foreign]);
    expect(sample.filter((c) => c.processes.length > 0)).toHaveLength(1);
  });

  it('refuses more cards and slices than one sample carries', () => {
    const mig = parseSimMigLayout('1g.10gb*7');
    expect(() => new SimSampler({ count: 17, mig })).toThrow(/at most 128/);
  });
});
