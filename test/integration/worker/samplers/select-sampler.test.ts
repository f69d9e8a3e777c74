import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  AUTO_SIM_CARD_COUNT,
  parseGpusOption,
  SIM_STATE_ENV,
  selectSampler,
} from '../../../../worker/samplers/select-sampler.js';
import {
  FAKE_HY_SMI,
  fakeH100Cards,
  fakeHyCards,
  fakeSmiEnv,
  readFakeSmiCalls,
  writeFakeSmiState,
  writeSimState,
} from '../../../fixtures/fake-smi.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'select-sampler-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('parseGpusOption', () => {
  it('accepts auto, nvidia, hy and sim:N', () => {
    expect(parseGpusOption('auto')).toEqual({ kind: 'auto' });
    expect(parseGpusOption('hy')).toEqual({ kind: 'hy' });
    expect(parseGpusOption('sim:4')).toEqual({ kind: 'sim', count: 4 });
  });

  it('refuses anything else, saying what is accepted', () => {
    for (const bad of ['sim:0', 'sim:65', 'sim:', 'amd', 'sim:1.5']) {
      expect(() => parseGpusOption(bad)).toThrow(/auto, nvidia, hy, sim:N or sim:N:mig=<layout>/);
    }
  });
});

describe('parseGpusOption with sim:N:mig=<layout> (ADR 0046)', () => {
  it('takes a layout a real card can have, for every simulated card', () => {
    const choice = parseGpusOption('sim:2:mig=3g.40gb+2g.20gb+1g.10gb');
    expect(choice).toMatchObject({ kind: 'sim', count: 2 });
    expect(choice.kind === 'sim' ? choice.mig?.map((i) => i.profile) : null).toEqual([
      '3g.40gb',
      '2g.20gb',
      '1g.10gb',
    ]);
  });

  it('refuses a layout no card can have, with the reason, and more slices than a sample carries', () => {
    expect(() => parseGpusOption('sim:1:mig=3g.40gb+3g.40gb+1g.10gb')).toThrow(/does not fit/);
    expect(() => parseGpusOption('sim:1:mig=9g.90gb')).toThrow(/no MIG profile/);
    expect(() => parseGpusOption('sim:17:mig=1g.10gb*7')).toThrow(/at most 128/);
    expect(parseGpusOption('sim:16:mig=1g.10gb*7')).toMatchObject({ kind: 'sim', count: 16 });
  });

  it('selectSampler says the cards are SIMULATED and in MIG mode', async () => {
    const choice = await selectSampler({ gpus: 'sim:1:mig=1g.10gb*7', env: {}, simSeed: 'w' });
    expect(choice.summary).toBe(
      'SIMULATED cards: requested, in MIG mode (1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb on each card: 7 SIMULATED slices)',
    );
    expect(await choice.sampler.sample()).toHaveLength(8);
  });
});

describe('selectSampler', () => {
  it('auto picks nvidia when nvidia-smi answers with cards', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: fakeH100Cards(2) });
    const choice = await selectSampler({ gpus: 'auto', env: fakeSmiEnv(statePath) });
    expect(choice).toMatchObject({
      provider: 'nvidia',
      simulated: false,
      summary: 'real cards: nvidia (2 cards)',
    });
    expect(await choice.sampler.sample()).toHaveLength(2);
  });

  it('auto falls back to simulated cards when neither tool exists', async () => {
    const choice = await selectSampler({ gpus: 'auto', env: { PATH: dir }, simSeed: 'w1' });
    expect(choice).toMatchObject({
      provider: 'sim',
      simulated: true,
      summary: 'SIMULATED cards: no nvidia-smi/hy-smi found',
    });
    expect(choice.reason).toBe('nvidia-smi not found on PATH; hy-smi not found on PATH');
    const cards = await choice.sampler.sample();
    expect(cards).toHaveLength(AUTO_SIM_CARD_COUNT);
    expect(cards.every((card) => card.simulated)).toBe(true);
  });

  it('auto picks hy when there is no nvidia-smi', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: fakeHyCards(2) });
    const choice = await selectSampler({
      gpus: 'auto',
      env: fakeSmiEnv(statePath, { onPath: false }),
      nvidiaSmiPath: join(dir, 'no-nvidia-smi'),
      hySmiPath: FAKE_HY_SMI,
      hostname: 'h',
    });
    expect(choice).toMatchObject({ provider: 'hy', summary: 'real cards: hy (2 cards)' });
    expect((await choice.sampler.sample())[0]?.uuid).toBe('hy-h-0');
  });

  it('auto skips a failing nvidia-smi and says why', async () => {
    const statePath = await writeFakeSmiState(dir, {
      cards: fakeHyCards(1),
      faults: [{ tool: 'nvidia-smi', action: 'fail', exit_code: 9, stdout: 'No devices were found\n' }],
    });
    const choice = await selectSampler({ gpus: 'auto', env: fakeSmiEnv(statePath) });
    expect(choice.provider).toBe('hy');
    expect(choice.summary).toBe('real cards: hy (1 card)');
  });

  it('auto simulates when nvidia-smi lists no cards, saying so', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: [] });
    const choice = await selectSampler({
      gpus: 'auto',
      env: fakeSmiEnv(statePath),
      hySmiPath: join(dir, 'no-hy-smi'),
      autoSimCount: 2,
    });
    expect(choice.provider).toBe('sim');
    expect(choice.summary).toMatch(/^SIMULATED cards: nvidia-smi found no cards; hy-smi not found at /);
    expect(await choice.sampler.sample()).toHaveLength(2);
  });

  it('an explicit provider is taken without probing', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: fakeH100Cards(1) });
    const choice = await selectSampler({ gpus: 'nvidia', env: fakeSmiEnv(statePath) });
    expect(choice).toMatchObject({ provider: 'nvidia', simulated: false });
    expect(await readFakeSmiCalls(statePath)).toEqual([]);
  });

  it('sim:N gives N simulated cards that follow the state file named in the environment', async () => {
    const simState = join(dir, 'sim.json');
    await writeSimState(simState, { cards: { '2': { memory_used_mib: 1234 } } });
    const choice = await selectSampler({ gpus: 'sim:3', env: { PATH: dir, [SIM_STATE_ENV]: simState } });
    expect(choice).toMatchObject({ provider: 'sim', simulated: true, summary: 'SIMULATED cards: requested' });
    const cards = await choice.sampler.sample();
    expect(cards.map((card) => card.memory_used_mib)).toEqual([0, 0, 1234]);
  });
});
