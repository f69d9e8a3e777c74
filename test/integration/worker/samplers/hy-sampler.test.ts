import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CardSampleSchema } from '../../../../src/contracts/sample.js';
import { SamplerError } from '../../../../worker/samplers/card-sampler.js';
import { HY_DEFAULT_MODEL, HySampler } from '../../../../worker/samplers/hy-sampler.js';
import { type FakeSmiState, fakeHyCards, fakeSmiEnv, writeFakeSmiState } from '../../../fixtures/fake-smi.js';

// These run the real sampler against test/fixtures/bin/hy-smi (real child processes).
let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'hy-sampler-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function sampler(state: FakeSmiState, timeoutMs = 10_000): Promise<HySampler> {
  const statePath = await writeFakeSmiState(dir, state);
  return new HySampler({ env: fakeSmiEnv(statePath), timeoutMs, hostname: 'dcu-host' });
}

async function sampleError(s: HySampler): Promise<SamplerError> {
  const error = await s.sample().then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SamplerError);
  return error as SamplerError;
}

describe('HySampler against the fake hy-smi', () => {
  it('reads the table and the memory details', async () => {
    const cards = fakeHyCards(2);
    cards[1] = { ...cards[1]!, memory_used_mib: 32760, utilization_pct: 87.5, perf: 'manual' };
    const sample = await (await sampler({ cards, hy: { util_decimals: true } })).sample();
    for (const card of sample) expect(CardSampleSchema.parse(card)).toEqual(card);
    expect(sample[0]).toEqual({
      index: 0,
      uuid: 'hy-dcu-host-0',
      model: 'K100_AI',
      memory_used_mib: 0,
      memory_total_mib: 65520,
      memory_used_pct: 0,
      utilization_pct: 0,
      temperature_c: 49,
      power_w: 118,
      health: 'unknown',
      health_reasons: ['hy-smi health counters are not read'],
      processes: [],
      simulated: false,
    });
    expect(sample[1]).toMatchObject({ uuid: 'hy-dcu-host-1', memory_used_mib: 32760, utilization_pct: 87.5 });
  });

  it('reads the HCU naming and N/A values', async () => {
    const cards = fakeHyCards(1);
    cards[0] = { ...cards[0]!, temperature_c: null, power_w: null };
    const [card] = await (await sampler({ cards, hy: { header: 'HCU' } })).sample();
    expect(card).toMatchObject({ temperature_c: null, power_w: null, utilization_pct: 0 });
  });

  it('keeps sampling with unknown memory when the details call fails', async () => {
    const s = await sampler({
      cards: fakeHyCards(2),
      faults: [{ action: 'fail', when: 'details', exit_code: 2, stderr: 'unrecognized arguments' }],
    });
    const sample = await s.sample();
    expect(sample).toHaveLength(2);
    expect(sample[0]).toMatchObject({
      model: HY_DEFAULT_MODEL,
      memory_total_mib: null,
      memory_used_mib: null,
      // The table's VRAM % still lets the scheduler prove the card idle.
      memory_used_pct: 0,
    });
    expect(sample[0]?.health_reasons[1]).toMatch(/memory query failed/);
  });

  it('fails with TOOL_FAILED when the table cannot be read', async () => {
    const s = await sampler({
      cards: fakeHyCards(1),
      faults: [{ action: 'fail', when: 'table', exit_code: 1, stderr: 'hyhal: device not found' }],
    });
    const error = await sampleError(s);
    expect(error.code).toBe('TOOL_FAILED');
    expect(error.message).toContain('hyhal: device not found');
  });

  it('kills a hanging hy-smi and fails with TOOL_TIMED_OUT', async () => {
    const s = await sampler({ cards: fakeHyCards(1), faults: [{ action: 'hang', when: 'table' }] }, 300);
    expect((await sampleError(s)).code).toBe('TOOL_TIMED_OUT');
  });

  it('fails with TOOL_NOT_FOUND when hy-smi is not there', async () => {
    const statePath = await writeFakeSmiState(dir, { cards: [] });
    const s = new HySampler({ env: fakeSmiEnv(statePath, { onPath: false }) });
    expect((await sampleError(s)).message).toBe('hy-smi not found on PATH');
  });
});
