import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../../../src/platform/package-root.js';
import {
  NVIDIA_APP_FIELDS,
  NVIDIA_CORE_FIELDS,
  NVIDIA_HEALTH_FIELDS,
  parseComputeAppsCsv,
  parseNvidiaCoreCsv,
  parseNvidiaHealthCsv,
} from '../../../../worker/samplers/nvidia-parse.js';
import { fakeH100Cards, fakeSmiEnv, writeFakeSmiState } from '../../../fixtures/fake-smi.js';
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
      DEVICE_CHECK_STEPS: 'sampler,workload',
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
    // No CUDA device on the test host: the workload step says why it did not run, and nothing aborts.
    expect(summary).toMatch(/workload \(direct, nccl\)\s+skipped: /);
    expect(String(run.stdout)).toContain('sampler cards');
  });
});
