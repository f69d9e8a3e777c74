import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CardSampleSchema, cardLabel } from '../../../../src/contracts/sample.js';
import { SamplerError } from '../../../../worker/samplers/card-sampler.js';
import { NvidiaSampler } from '../../../../worker/samplers/nvidia-sampler.js';
import {
  FAKE_NVIDIA_SMI,
  type FakeMigModel,
  type FakeSmiState,
  fakeH100Cards,
  fakeMigBoard,
  fakeMigCards,
  fakeMigMinor,
  fakeMigMinorsText,
  fakeSmiEnv,
  readFakeSmiCalls,
  writeFakeSmiState,
} from '../../../fixtures/fake-smi.js';

// These run the real sampler against test/fixtures/bin/nvidia-smi (real child processes).
let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'nvidia-sampler-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function sampler(state: FakeSmiState, timeoutMs = 10_000) {
  const statePath = await writeFakeSmiState(dir, state);
  return { statePath, sampler: new NvidiaSampler({ env: fakeSmiEnv(statePath), timeoutMs }) };
}

async function sampleError(s: NvidiaSampler): Promise<SamplerError> {
  const error = await s.sample().then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SamplerError);
  return error as SamplerError;
}

describe('NvidiaSampler against the fake nvidia-smi', () => {
  it('reads the documented cards, with [N/A] as null and no processes', async () => {
    const cards = fakeH100Cards(2);
    cards[1] = { ...cards[1]!, power_w: null, utilization_pct: '[Not Supported]' };
    const { sampler: s } = await sampler({ cards });
    const sample = await s.sample();
    expect(sample).toHaveLength(2);
    for (const card of sample) expect(CardSampleSchema.parse(card)).toEqual(card);
    expect(sample[0]).toEqual({
      index: 0,
      uuid: 'GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1',
      model: 'NVIDIA H100 80GB HBM3',
      memory_used_mib: 1,
      memory_total_mib: 81559,
      utilization_pct: 0,
      temperature_c: 30,
      power_w: 100.89,
      health: 'ok',
      health_reasons: [],
      processes: [],
      simulated: false,
    });
    expect(sample[1]).toMatchObject({ power_w: null, utilization_pct: null, memory_total_mib: 81559 });
  });

  it('attaches processes to the card with their uuid', async () => {
    const cards = fakeH100Cards(3);
    const { sampler: s } = await sampler({
      cards,
      processes: [
        { gpu_uuid: cards[1]!.uuid!, pid: 48213, name: 'python', used_memory_mib: 40560 },
        { gpu_uuid: cards[1]!.uuid!, pid: 48214, name: '/usr/bin/python3', used_memory_mib: null },
        { gpu_uuid: 'GPU-not-listed', pid: 1, name: 'ghost', used_memory_mib: 1 },
      ],
    });
    const sample = await s.sample();
    expect(sample[0]?.processes).toEqual([]);
    expect(sample[1]?.processes).toEqual([
      { pid: 48213, name: 'python', used_memory_mib: 40560 },
      { pid: 48214, name: '/usr/bin/python3', used_memory_mib: null },
    ]);
    expect(sample[2]?.processes).toEqual([]);
  });

  it('drops health fields an old driver refuses, keeps the rest, and does not ask again', async () => {
    const { sampler: s, statePath } = await sampler({
      cards: fakeH100Cards(1),
      nvidia: { unsupported_fields: ['remapped_rows.pending', 'retired_pages.pending'] },
    });
    const first = await s.sample();
    expect(first[0]?.health).toBe('ok');
    expect([...s.refusedHealthFields].sort()).toEqual(['remapped_rows.pending', 'retired_pages.pending']);

    const before = (await readFakeSmiCalls(statePath)).length;
    await s.sample();
    const second = (await readFakeSmiCalls(statePath)).slice(before);
    // core, health, compute apps, MIG mode (no card in MIG mode: nothing more)
    expect(second).toHaveLength(4);
    expect(second.some((call) => call.args.join(' ').includes('remapped_rows.pending'))).toBe(false);
  });

  it('leaves health unknown, without failing, when no health field is supported', async () => {
    const { sampler: s } = await sampler({
      cards: fakeH100Cards(1),
      nvidia: {
        unsupported_fields: [
          'ecc.errors.uncorrected.volatile.total',
          'remapped_rows.pending',
          'remapped_rows.failure',
          'retired_pages.pending',
        ],
      },
    });
    const [card] = await s.sample();
    expect(card?.health).toBe('unknown');
    expect(card?.memory_total_mib).toBe(81559);
  });

  it('leaves health unknown with a reason when the health query fails otherwise', async () => {
    const { sampler: s } = await sampler({
      cards: fakeH100Cards(1),
      faults: [
        {
          action: 'fail',
          fields_include: 'ecc.errors.uncorrected.volatile.total',
          exit_code: 15,
          stdout: 'Unknown Error\n',
        },
      ],
    });
    const [card] = await s.sample();
    expect(card?.health).toBe('unknown');
    expect(card?.health_reasons[0]).toMatch(/health query failed: .*exited 15: Unknown Error/);
  });

  it('reports uncorrected ECC and remap failures', async () => {
    const cards = fakeH100Cards(3);
    cards[0] = { ...cards[0]!, ecc_uncorrected: 2 };
    cards[1] = { ...cards[1]!, remapped_rows_failure: true };
    cards[2] = { ...cards[2]!, ecc_uncorrected: null };
    const { sampler: s } = await sampler({ cards });
    const sample = await s.sample();
    expect(sample[0]).toMatchObject({ health: 'degraded', health_reasons: ['ecc.uncorrected.volatile=2'] });
    expect(sample[1]?.health).toBe('failed');
    expect(sample[2]?.health).toBe('ok');
  });

  it('fails with TOOL_FAILED quoting the tool, and recovers after a transient failure', async () => {
    const { sampler: s } = await sampler({
      cards: fakeH100Cards(1),
      faults: [
        {
          action: 'fail',
          times: 1,
          exit_code: 9,
          stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        },
      ],
    });
    const error = await sampleError(s);
    expect(error.code).toBe('TOOL_FAILED');
    expect(error.details.exitCode).toBe(9);
    expect(error.message).toContain("exited 9: NVIDIA-SMI has failed because it couldn't communicate");
    expect(await s.sample()).toHaveLength(1);
  });

  it('fails the whole sample when processes cannot be listed', async () => {
    const { sampler: s } = await sampler({
      cards: fakeH100Cards(1),
      faults: [{ action: 'fail', when: 'query-compute-apps', exit_code: 3 }],
    });
    expect((await sampleError(s)).code).toBe('TOOL_FAILED');
  });

  it('kills a hanging nvidia-smi and fails with TOOL_TIMED_OUT', async () => {
    const { sampler: s } = await sampler({ cards: fakeH100Cards(1), faults: [{ action: 'hang' }] }, 300);
    const error = await sampleError(s);
    expect(error.code).toBe('TOOL_TIMED_OUT');
    expect(error.message).toMatch(/did not answer within 300 ms/);
  });

  it('fails with OUTPUT_TOO_LARGE past the output cap', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: fakeH100Cards(4) });
    const s = new NvidiaSampler({ env: fakeSmiEnv(statePath), maxBufferBytes: 64 });
    expect((await sampleError(s)).code).toBe('OUTPUT_TOO_LARGE');
  });

  it('fails with TOOL_NOT_FOUND when nvidia-smi is not there', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: [] });
    const offPath = new NvidiaSampler({ env: fakeSmiEnv(statePath, { onPath: false }) });
    const onPath = await sampleError(offPath);
    expect(onPath.code).toBe('TOOL_NOT_FOUND');
    expect(onPath.message).toBe('nvidia-smi not found on PATH');
    const missing = new NvidiaSampler({ nvidiaSmiPath: join(dir, 'nvidia-smi'), env: fakeSmiEnv(statePath) });
    expect((await sampleError(missing)).message).toMatch(/not found at/);
  });

  it('runs the executable it is pointed at', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: fakeH100Cards(2) });
    const s = new NvidiaSampler({
      nvidiaSmiPath: FAKE_NVIDIA_SMI,
      env: fakeSmiEnv(statePath, { onPath: false }),
    });
    expect(await s.sample()).toHaveLength(2);
  });
});

describe('NvidiaSampler on cards in MIG mode (ADR 0046)', () => {
  async function migSampler(state: FakeSmiState, minors: string | null = fakeMigMinorsText()) {
    const statePath = await writeFakeSmiState(dir, state);
    const migMinorsPath = join(dir, 'mig-minors');
    if (minors !== null) await writeFile(migMinorsPath, minors);
    return { statePath, sampler: new NvidiaSampler({ env: fakeSmiEnv(statePath), migMinorsPath }) };
  }

  for (const model of ['A100-40GB', 'A100-80GB', 'H100-80GB', 'H200'] as FakeMigModel[]) {
    it(`reports each compute instance of a ${model} as a card of its own, the parent in MIG mode`, async () => {
      const { sampler: s } = await migSampler({ cards: [...fakeMigCards(model, 2)] });
      const sample = await s.sample();
      const board = fakeMigBoard(model);
      expect(sample).toHaveLength(2 + 2 * board.layout.length);
      for (const card of sample) expect(CardSampleSchema.parse(card)).toEqual(card);
      expect(sample.slice(0, 2).map((c) => c.mig_mode)).toEqual(['enabled', 'enabled']);
      const slices = sample.slice(2);
      for (const card of slices) {
        const mig = card.mig!;
        const [, profile, , , , memory] = board.layout.find(([gi]) => gi === mig.gpu_instance)!;
        expect(cardLabel(card.index)).toBe(`${mig.parent_index}:mig:${mig.gpu_instance}/0`);
        expect(card).toMatchObject({ model: board.name, memory_total_mib: memory, health: 'ok' });
        expect(card.uuid).toMatch(/^MIG-/);
        expect(mig).toMatchObject({
          profile,
          parent_uuid: sample[mig.parent_index]!.uuid,
          gi_access_minor: fakeMigMinor(mig.parent_index, mig.gpu_instance),
          ci_access_minor: fakeMigMinor(mig.parent_index, mig.gpu_instance, 0),
          memory_source: 'instance',
        });
      }
    });
  }

  it("gives a slice its own instance's memory in use (the MIG devices table), and no utilisation", async () => {
    // nvidia-smi prints memory per instance in the MIG devices table; it has no utilisation per instance,
    // and prints utilization.gpu [N/A] for a card in MIG mode.
    const [card] = fakeMigCards('A100-80GB', 1);
    const instances = card!.mig!.instances!.map((inst) =>
      inst.gi === 3 ? { ...inst, memory_used_mib: 3021 } : inst,
    );
    const { sampler: s } = await migSampler({
      cards: [{ ...card!, memory_used_mib: 3021, mig: { ...card!.mig!, instances } }],
    });
    const sample = await s.sample();
    expect(sample[0]).toMatchObject({ mig_mode: 'enabled', memory_used_mib: 3021, utilization_pct: null });
    const used = sample.slice(1).map((c) => [cardLabel(c.index), c.memory_used_mib, c.memory_total_mib]);
    expect(used).toEqual([
      ['0:mig:2/0', 0, 40192],
      ['0:mig:3/0', 3021, 19968],
      ['0:mig:9/0', 0, 9728],
      ['0:mig:10/0', 0, 9728],
    ]);
    for (const slice of sample.slice(1))
      expect(slice).toMatchObject({ utilization_pct: null, temperature_c: null, power_w: null });
  });

  it('reads the R450 uuids too', async () => {
    const { sampler: s } = await migSampler({ cards: fakeMigCards('A100-80GB', 1, { r450_uuids: true }) });
    const slices = (await s.sample()).filter((c) => c.mig);
    expect(slices.length).toBeGreaterThan(0);
    for (const slice of slices)
      expect(slice.uuid).toBe(`MIG-GPU-${slice.mig!.parent_uuid.slice(4)}/${slice.mig!.gpu_instance}/0`);
  });

  it('reports a slice without capability minors as unknown, with the reason, never as ok', async () => {
    const { sampler: s } = await migSampler({ cards: fakeMigCards('H100-80GB', 1) }, null);
    const slices = (await s.sample()).filter((c) => c.mig);
    expect(slices.length).toBeGreaterThan(0);
    for (const slice of slices) {
      expect(slice.health).toBe('unknown');
      expect(slice.health_reasons[0]).toBe('a capability minor is unknown');
      expect(slice.mig?.gi_access_minor).toBeNull();
    }
  });

  it('fails the sample when a MIG listing fails, rather than report a MIG card without its slices', async () => {
    const { sampler: s } = await migSampler({
      cards: fakeMigCards('H100-80GB', 1),
      faults: [{ action: 'fail', when: 'mig', exit_code: 4, stdout: 'Insufficient Permissions\n' }],
    });
    expect((await sampleError(s)).code).toBe('TOOL_FAILED');
  });

  it('does not ask a driver without MIG again, and leaves a card with MIG disabled whole', async () => {
    const { sampler: s, statePath } = await migSampler({
      cards: [...fakeH100Cards(1)],
      nvidia: { unsupported_fields: ['mig.mode.current'] },
    });
    expect(await s.sample()).toHaveLength(1);
    const before = (await readFakeSmiCalls(statePath)).length;
    const [card] = await s.sample();
    expect((await readFakeSmiCalls(statePath)).slice(before)).toHaveLength(3);
    expect(card?.mig_mode).toBeUndefined();
  });
});
