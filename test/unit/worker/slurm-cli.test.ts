import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { CliIo } from '../../../src/cli/common/io.js';
import { run } from '../../../src/cli/host/worker.js';

/**
 * `gpu-broker worker --backend slurm`: bad flags are refused before anything starts, with the reason
 * (exit 2). The whole backend runs against a real Slurm in test/integration/cluster/slurm-backend.test.ts.
 */

const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-slurm-cli-'));
const tokenFile = join(dir, 'token');
writeFileSync(tokenFile, 'x'.repeat(40));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function refused(extra: string[]): Promise<string> {
  const err: string[] = [];
  const io: CliIo = {
    stdout: () => undefined,
    stderr: (t) => void err.push(t),
    env: { GPU_BROKER_LOG_LEVEL: 'silent' },
  };
  const code = await run(
    ['--url', 'http://127.0.0.1:9', '--token-file', tokenFile, '--id', 'w', ...extra],
    io,
  );
  expect(code).toBe(2);
  return err.join('');
}

describe('gpu-broker worker --backend slurm flags', () => {
  it('needs a partition and an absolute shared job dir', async () => {
    expect(await refused(['--backend', 'slurm', '--slurm-job-dir', '/tmp/x'])).toContain('--slurm-partition');
    expect(await refused(['--backend', 'slurm', '--slurm-partition', 'gpu'])).toContain('--slurm-job-dir');
    expect(
      await refused(['--backend', 'slurm', '--slurm-partition', 'gpu', '--slurm-job-dir', 'rel/dir']),
    ).toContain('absolute');
  });

  it('refuses an unknown backend, Slurm flags without it, and a bad poll interval', async () => {
    expect(await refused(['--backend', 'k8s'])).toContain('local or slurm');
    expect(await refused(['--slurm-partition', 'gpu'])).toContain('needs --backend slurm');
    expect(await refused(['--slurm-simulated-gpus'])).toContain(
      '--slurm-simulated-gpus needs --backend slurm',
    );
    expect(
      await refused([
        '--backend',
        'slurm',
        '--slurm-partition',
        'gpu',
        '--slurm-job-dir',
        '/tmp/j',
        '--slurm-poll-ms',
        '5',
      ]),
    ).toContain('--slurm-poll-ms');
  });

  it('refuses a relative or multi-line GPU device dir, and the flag without --backend slurm', async () => {
    const base = ['--backend', 'slurm', '--slurm-partition', 'gpu', '--slurm-job-dir', '/tmp/j'];
    expect(await refused([...base, '--slurm-gpu-dev-dir', 'dev'])).toContain('--slurm-gpu-dev-dir');
    expect(await refused([...base, '--slurm-gpu-dev-dir', '/dev\n/x'])).toContain('--slurm-gpu-dev-dir');
    expect(await refused(['--slurm-gpu-dev-dir', '/dev'])).toContain('needs --backend slurm');
    expect(await refused([...base, '--slurm-gpu-kind', 'amd'])).toContain('give nvidia or hy');
    // The hint of a Slurm worker's error is the Slurm usage line, not the local worker's.
    expect(await refused([...base, '--slurm-gpu-dev-dir', 'dev'])).toContain('--slurm-partition NAME');
  });

  it('refuses hostile names and an extra argument that would override what the broker sets', async () => {
    expect(
      await refused(['--backend', 'slurm', '--slurm-partition', 'gpu;rm -rf /', '--slurm-job-dir', '/tmp/j']),
    ).toContain('--slurm-partition');
    expect(
      await refused([
        '--backend',
        'slurm',
        '--slurm-partition',
        'gpu',
        '--slurm-job-dir',
        '/tmp/j',
        '--slurm-extra-arg',
        '--gres=gpu:8',
      ]),
    ).toContain('--slurm-extra-arg');
  });
});
