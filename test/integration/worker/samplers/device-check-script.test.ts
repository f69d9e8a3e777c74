import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../../../src/platform/package-root.js';
import {
  parseCapabilityAccess,
  parseComputeInstances,
  parseGpuInstances,
  parseMigDevicesTable,
  parseMigMinors,
  parseMigModeCsv,
  parseNvidiaList,
} from '../../../../worker/samplers/mig-parse.js';
import { joinMigSlices } from '../../../../worker/samplers/mig-slices.js';
import {
  NVIDIA_APP_FIELDS,
  NVIDIA_CORE_FIELDS,
  NVIDIA_HEALTH_FIELDS,
  parseComputeAppsCsv,
  parseNvidiaCoreCsv,
  parseNvidiaHealthCsv,
} from '../../../../worker/samplers/nvidia-parse.js';
import {
  type FakeSmiState,
  fakeH100Cards,
  fakeMigCards,
  fakeMigMinor,
  fakeMigMinorsText,
  fakeSmiEnv,
  readFakeSmiCalls,
  writeFakeSmiState,
} from '../../../fixtures/fake-smi.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

// scripts/device-check.sh ("On a real GPU") cannot run for real without a GPU; here its
// sampler step runs against the fake nvidia-smi, so the calls it captures are the sampler's own.

const SCRIPT = join(packageRoot(), 'scripts', 'device-check.sh');
const CSV = '--format=csv,noheader,nounits';
let out: string;
let run: ReturnType<typeof spawnSync>;

beforeAll(async () => {
  const dir = makeTempDir('device-check');
  out = join(dir, 'out');
  const state = await writeFakeSmiState(dir, {
    cards: fakeH100Cards(2),
    nvidia: { unsupported_fields: ['remapped_rows.failure'] },
  });
  const env = fakeSmiEnv(state);
  run = spawnSync('bash', [SCRIPT], {
    env: {
      ...process.env,
      ...env,
      PATH: `${env['PATH']}:${process.env['PATH']}`,
      OUT: out,
      DEVICE_CHECK_STEPS: 'sampler,mig,workload',
      DEVICE_CHECK_BUILD: '0',
    },
    encoding: 'utf8',
    timeout: 120_000,
  });
});
afterAll(() => removeTempDirs());

const argv = (name: string) =>
  readFileSync(join(out, 'sampler', `${name}.argv`), 'utf8')
    .trim()
    .split('\n');
const stdout = (name: string) => readFileSync(join(out, 'sampler', `${name}.stdout`), 'utf8');

describe('scripts/device-check.sh', () => {
  it('is valid bash', () => {
    expect(() => execFileSync('bash', ['-n', SCRIPT])).not.toThrow();
  });

  it('runs the nvidia sampler’s exact calls and keeps their raw output, which the sampler parses', () => {
    expect(run.status, String(run.stderr)).toBe(0);
    expect(argv('core').slice(1)).toEqual([`--query-gpu=${NVIDIA_CORE_FIELDS.join(',')}`, CSV]);
    expect(argv('health').slice(1)).toEqual([`--query-gpu=uuid,${NVIDIA_HEALTH_FIELDS.join(',')}`, CSV]);
    expect(argv('apps').slice(1)).toEqual([`--query-compute-apps=${NVIDIA_APP_FIELDS.join(',')}`, CSV]);
    expect(parseNvidiaCoreCsv(stdout('core')).map((c) => c.uuid)).toEqual(
      fakeH100Cards(2).map((c) => c.uuid),
    );
    expect(parseComputeAppsCsv(stdout('apps'))).toEqual([]);
    // This fake driver refuses one field: the combined query fails as the sampler sees it; alone, the
    // others answer.
    expect(readFileSync(join(out, 'sampler', 'health.exit'), 'utf8').trim()).not.toBe('0');
    expect(parseNvidiaHealthCsv(stdout('health-retired_pages.pending'), ['retired_pages.pending']).size).toBe(
      2,
    );
  });

  it('prints the table, skipping what it cannot run here with a reason', () => {
    const summary = readFileSync(join(out, 'summary.txt'), 'utf8');
    expect(summary).toMatch(/sampler cards\s+2 × NVIDIA H100 80GB HBM3 \(81559 MiB, 100.89 W\)/);
    expect(summary).toMatch(
      /sampler health fields\s+ok: .*retired_pages.pending.*; refused: remapped_rows.failure/,
    );
    // Cards not in MIG mode: the MIG step says so and lists nothing more.
    expect(summary).toMatch(/mig mode\s+enabled on 0 of 2 card\(s\)/);
    // No CUDA device on the test host: the workload step says why it did not run, and nothing aborts.
    expect(summary).toMatch(/workload \(direct, nccl\)\s+skipped: /);
    expect(String(run.stdout)).toContain('sampler cards');
  });
});

describe('scripts/device-check.sh, MIG step (ADR 0046)', () => {
  const MUTATING = ['-mig', '-cgi', '-dgi', '-cci', '-dci', '--gpu-reset', '-r'];

  async function runMig(state: FakeSmiState, withCaps: boolean) {
    const dir = makeTempDir('device-check-mig');
    const statePath = await writeFakeSmiState(dir, state);
    const minors = join(dir, 'mig-minors');
    writeFileSync(minors, fakeMigMinorsText());
    const caps = join(dir, 'capabilities');
    if (withCaps) {
      for (const card of state.cards) {
        for (const inst of card.mig?.instances ?? []) {
          const gi = join(caps, `gpu${card.index}`, 'mig', `gi${inst.gi}`);
          mkdirSync(join(gi, 'ci0'), { recursive: true });
          writeFileSync(
            join(gi, 'access'),
            `DeviceFileMinor: ${fakeMigMinor(card.index, inst.gi)}\nDeviceFileMode: 292\n`,
          );
          writeFileSync(
            join(gi, 'ci0', 'access'),
            `DeviceFileMinor: ${fakeMigMinor(card.index, inst.gi, 0)}\n`,
          );
        }
      }
    }
    const env = fakeSmiEnv(statePath);
    const outDir = join(dir, 'out');
    const result = spawnSync('bash', [SCRIPT], {
      env: {
        ...process.env,
        ...env,
        PATH: `${env['PATH']}:${process.env['PATH']}`,
        OUT: outDir,
        DEVICE_CHECK_STEPS: 'mig',
        DEVICE_CHECK_BUILD: '0',
        DEVICE_CHECK_MIG_MINORS: minors,
        DEVICE_CHECK_MIG_CAPS: caps,
      },
      encoding: 'utf8',
      timeout: 120_000,
    });
    const read = (name: string) => readFileSync(join(outDir, 'mig', name), 'utf8');
    return { result, read, statePath, summary: readFileSync(join(outDir, 'summary.txt'), 'utf8') };
  }

  it('prints and keeps every MIG listing of a card in MIG mode, which the MIG parsers read back', async () => {
    const cards = fakeMigCards('A100-80GB', 2);
    const { result, read, statePath, summary } = await runMig({ cards }, true);
    expect(result.status, String(result.stderr)).toBe(0);
    for (const shown of [
      '$ nvidia-smi -L',
      '$ nvidia-smi --query-gpu=mig.mode.current --format=csv',
      '$ nvidia-smi mig -lgi',
      '$ nvidia-smi mig -lci',
      'MIG 3g.40gb',
      'gpu0/gi0/access 3',
    ]) {
      expect(String(result.stdout)).toContain(shown);
    }
    expect(read('mode.stdout')).toBe('mig.mode.current\nEnabled\nEnabled\n');
    const joined = joinMigSlices({
      list: parseNvidiaList(read('list.stdout')),
      modes: parseMigModeCsv(read('mode-index.stdout')).rows,
      gpuInstances: parseGpuInstances(read('lgi.stdout')).rows,
      computeInstances: parseComputeInstances(read('lci.stdout')).rows,
      devices: parseMigDevicesTable(read('table.stdout')).rows,
      minors: parseMigMinors(read('mig-minors.txt')).minors,
    });
    expect(joined.problems).toEqual([]);
    expect(joined.slices.map((slice) => slice.id)).toEqual([
      '0:mig:2/0',
      '0:mig:3/0',
      '0:mig:9/0',
      '0:mig:10/0',
      '1:mig:2/0',
      '1:mig:3/0',
      '1:mig:9/0',
      '1:mig:10/0',
    ]);
    const capsLine = read('capabilities.txt')
      .split('\n')
      .find((line) => line.includes('gpu0/mig/gi2/ci0/access'));
    expect(parseCapabilityAccess(capsLine?.split(':').slice(1).join(':') ?? '')).toEqual({
      minor: fakeMigMinor(0, 2, 0),
    });
    expect(summary).toMatch(/mig mode\s+enabled on 2 of 2 card\(s\)/);
    expect(summary).toMatch(
      /mig instances\s+lgi exit 0: 8 GPU instance\(s\); lci exit 0: 8 compute instance\(s\)/,
    );
    expect(summary).toMatch(/mig parse\s+(not run|\d+ slice)/);
    // Read-only: no call that could change a card's MIG mode or instances.
    const calls = await readFakeSmiCalls(statePath);
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.flatMap((call) => call.args).filter((arg) => MUTATING.includes(arg))).toEqual([]);
  });

  it('keeps going when the MIG listings fail (no permission), saying so in the table', async () => {
    const { result, summary } = await runMig(
      {
        cards: fakeMigCards('H100-80GB', 1),
        faults: [
          {
            tool: 'nvidia-smi',
            when: 'mig',
            action: 'fail',
            exit_code: 4,
            stdout: 'Insufficient Permissions\n',
          },
        ],
      },
      false,
    );
    expect(result.status, String(result.stderr)).toBe(0);
    expect(summary).toMatch(
      /mig instances\s+lgi exit 4: 0 GPU instance\(s\); lci exit 4: 0 compute instance\(s\)/,
    );
  });

  it('keeps going where nvidia-smi has no MIG support, printing the error', async () => {
    const { result, summary } = await runMig(
      { cards: fakeH100Cards(1), nvidia: { unsupported_fields: ['mig.mode.current'] } },
      false,
    );
    expect(result.status, String(result.stderr)).toBe(0);
    expect(summary).toMatch(
      /mig mode\s+not readable \(exit 2\): Field "mig.mode.current" is not a valid field/,
    );
  });
});
