import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import {
  parseComputeInstances,
  parseGpuInstances,
  parseMigDevicesTable,
  parseMigMinors,
  parseMigModeCsv,
  parseNvidiaList,
} from '../../../../worker/samplers/mig-parse.js';
import { findMigProfile, migCardModel } from '../../../../worker/samplers/mig-profiles.js';
import { joinMigSlices } from '../../../../worker/samplers/mig-slices.js';
import {
  FAKE_NVIDIA_SMI,
  type FakeCard,
  type FakeMigModel,
  fakeH100Cards,
  fakeMigBoard,
  fakeMigCards,
  fakeMigMinor,
  fakeMigMinorsText,
  fakeSmiEnv,
  writeFakeSmiState,
} from '../../../fixtures/fake-smi.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

// The MIG parsers against the fake nvidia-smi's MIG layouts: the commands the sampler will run, the real
// formats back, the slices joined from them.

const run = promisify(execFile);
afterAll(() => removeTempDirs());

async function smi(statePath: string, args: string[]): Promise<{ stdout: string; code: number }> {
  try {
    const { stdout } = await run(FAKE_NVIDIA_SMI, args, { env: fakeSmiEnv(statePath) });
    return { stdout, code: 0 };
  } catch (error) {
    const failed = error as { stdout?: string; code?: number };
    return { stdout: failed.stdout ?? '', code: failed.code ?? -1 };
  }
}

async function discover(cards: FakeCard[]) {
  const state = await writeFakeSmiState(makeTempDir('mig-fake'), { cards });
  const [list, modes, lgi, lci, table] = await Promise.all([
    smi(state, ['-L']),
    smi(state, ['--query-gpu=index,uuid,mig.mode.current', '--format=csv,noheader']),
    smi(state, ['mig', '-lgi']),
    smi(state, ['mig', '-lci']),
    smi(state, []),
  ]);
  const parsed = {
    list: parseNvidiaList(list.stdout),
    modes: parseMigModeCsv(modes.stdout),
    gpuInstances: parseGpuInstances(lgi.stdout),
    computeInstances: parseComputeInstances(lci.stdout),
    devices: parseMigDevicesTable(table.stdout),
    minors: parseMigMinors(fakeMigMinorsText()),
  };
  const parseProblems = [
    ...parsed.list.problems,
    ...parsed.modes.problems,
    ...parsed.gpuInstances.problems,
    ...parsed.computeInstances.problems,
    ...parsed.devices.problems,
    ...parsed.minors.problems,
  ];
  const joined = joinMigSlices({
    list: parsed.list,
    modes: parsed.modes.rows,
    gpuInstances: parsed.gpuInstances.rows,
    computeInstances: parsed.computeInstances.rows,
    devices: parsed.devices.rows,
    minors: parsed.minors.minors,
  });
  return { parseProblems, joined, codes: { lgi: lgi.code, lci: lci.code } };
}

describe('MIG layouts of the fake nvidia-smi, read by the MIG parsers', () => {
  for (const model of ['A100-40GB', 'A100-80GB', 'H100-80GB', 'H200'] as const satisfies FakeMigModel[]) {
    it(`${model}: every GPU instance is one slice with its profile, memory, uuid and minors`, async () => {
      const cards = fakeMigCards(model, 2);
      const { parseProblems, joined } = await discover(cards);
      expect(parseProblems).toEqual([]);
      expect(joined.problems).toEqual([]);
      expect(joined.migCards).toEqual([0, 1]);
      const board = fakeMigBoard(model);
      expect(migCardModel(board.name, board.memory)).toBe(model);
      const expected = cards.flatMap((card) =>
        [...board.layout]
          .sort((a, b) => a[0] - b[0])
          .map(([gi, profile, , , , memory]) => ({
            id: `${card.index}:mig:${gi}/0`,
            profile,
            parent_uuid: card.uuid,
            parent_model: model,
            memory_total_mib: memory,
            memory_source: 'instance',
            mig_uuid: card.mig?.instances.find((inst) => inst.gi === gi)?.uuid,
            gi_access_minor: fakeMigMinor(card.index, gi),
            ci_access_minor: fakeMigMinor(card.index, gi, 0),
          })),
      );
      expect(joined.slices).toEqual(expected.map((slice) => expect.objectContaining(slice)));
      // The fake's layouts use each board's real profiles, and fill its 7 compute slices.
      for (const [, profile] of board.layout) expect(findMigProfile(model, profile)).not.toBeNull();
      const slices = joined.slices
        .filter((s) => s.parent_index === 0)
        .reduce((sum, s) => sum + s.compute_slices, 0);
      expect(slices).toBe(7);
    });
  }

  it('R450 uuids map by their own GI/CI', async () => {
    const cards = fakeMigCards('A100-40GB', 1, { r450_uuids: true });
    const { parseProblems, joined } = await discover(cards);
    expect(parseProblems).toEqual([]);
    expect(joined.slices.map((s) => s.mig_uuid)).toEqual(
      [1, 3, 9, 10].map((gi) => `MIG-${cards[0]?.uuid}/${gi}/0`),
    );
  });

  it('a whole card beside a MIG card: only the MIG card has slices; no MIG card at all is not an error', async () => {
    const mixed = await discover([
      ...fakeMigCards('H100-80GB', 1),
      { ...fakeH100Cards(2)[1], index: 1 } as FakeCard,
    ]);
    expect(mixed.joined.migCards).toEqual([0]);
    expect(new Set(mixed.joined.slices.map((s) => s.parent_index))).toEqual(new Set([0]));

    const none = await discover(fakeH100Cards(2));
    expect(none.parseProblems).toEqual([]);
    expect(none.joined).toEqual({ slices: [], migCards: [], problems: [] });
    expect(none.codes).toEqual({ lgi: 6, lci: 6 });
  });

  it('MIG mode on with no instances yet: the card is in MIG mode (never leased whole) with no slices', async () => {
    const [card] = fakeMigCards('H200', 1);
    const { parseProblems, joined } = await discover([
      { ...(card as FakeCard), mig: { mode: 'Enabled', instances: [] } },
    ]);
    expect(parseProblems).toEqual([]);
    expect(joined).toEqual({ slices: [], migCards: [0], problems: [] });
  });
});
