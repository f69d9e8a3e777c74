import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CliIo } from '../../../../src/cli/common/io.js';
import { run } from '../../../../src/cli/host/worker.js';
import { FakeMaster } from '../../../support/fake-master.js';
import { waitFor } from '../../../support/wait.js';

let dir: string;
let master: FakeMaster;
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gpu-broker-worker-cli-'));
  master = await FakeMaster.start();
});
afterEach(async () => {
  await master.close();
  rmSync(dir, { recursive: true, force: true });
});

function io(
  env: Record<string, string> = {},
  stop?: Promise<void>,
): CliIo & { out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    stdout: (t) => void out.push(t),
    stderr: (t) => void err.push(t),
    env: { GPU_BROKER_LOG_LEVEL: 'silent', ...env },
    ...(stop === undefined ? {} : { stopSignal: stop }),
  };
}

describe('gpu-broker worker', () => {
  it('connects, says which cards it has, and stops on the stop signal', { timeout: 3000 }, async () => {
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, `${master.token}\n`);
    let stop!: () => void;
    const cli = io({}, new Promise<void>((r) => (stop = r)));
    const exit = run(
      [
        '--url',
        master.url,
        '--token-file',
        tokenFile,
        '--id',
        'cli-1',
        '--gpus',
        'sim:3',
        '--data-dir',
        join(dir, 'd'),
        '--container-engine',
        'none',
        '--json',
      ],
      cli,
    );
    await waitFor(() => master.processed('sample').length > 0, { timeoutMs: 2500, what: 'a sample' });
    expect(master.processed('hello')[0]).toMatchObject({ worker_id: 'cli-1', provider: 'sim' });
    expect(JSON.parse(cli.out.join(''))).toMatchObject({
      worker_id: 'cli-1',
      provider: 'sim',
      simulated: true,
      cards: 3,
      summary: expect.stringMatching(/^SIMULATED cards: sim:3/),
    });
    stop();
    expect(await exit).toBe(0);
  });

  it('takes the token from GPU_BROKER_WORKER_TOKEN and prints the choice for people', {
    timeout: 3000,
  }, async () => {
    let stop!: () => void;
    const cli = io({ GPU_BROKER_WORKER_TOKEN: master.token }, new Promise<void>((r) => (stop = r)));
    const exit = run(
      ['--url', master.url, '--gpus', 'sim:2', '--data-dir', join(dir, 'd'), '--container-engine', 'none'],
      cli,
    );
    await waitFor(() => master.processed('hello').length > 0);
    await waitFor(() => cli.err.join('').includes('SIMULATED cards: sim:2'));
    stop();
    expect(await exit).toBe(0);
  });

  it('by default runs container tasks with this machine’s podman, and says so in the hello and banner', {
    timeout: 15_000,
  }, async () => {
    let stop!: () => void;
    const cli = io({ GPU_BROKER_WORKER_TOKEN: master.token }, new Promise<void>((r) => (stop = r)));
    const exit = run(['--url', master.url, '--gpus', 'sim:2', '--data-dir', join(dir, 'd'), '--json'], cli);
    await waitFor(() => master.processed('hello').length > 0, { timeoutMs: 10_000, what: 'a hello' });
    expect(master.processed('hello')[0]).toMatchObject({ container_engine: 'podman' });
    await waitFor(() => cli.out.join('').includes('\n'), { timeoutMs: 5000, what: 'the JSON banner' });
    expect(JSON.parse(cli.out.join(''))).toMatchObject({
      container_engine: 'podman',
      container_summary: expect.stringMatching(/^container tasks: podman/),
    });
    stop();
    expect(await exit).toBe(0);
  });

  it('with --container-engine none, has no engine and says container tasks wait', {
    timeout: 5000,
  }, async () => {
    let stop!: () => void;
    const cli = io({ GPU_BROKER_WORKER_TOKEN: master.token }, new Promise<void>((r) => (stop = r)));
    const args = [
      '--url',
      master.url,
      '--gpus',
      'sim:2',
      '--data-dir',
      join(dir, 'd'),
      '--container-engine',
      'none',
    ];
    const exit = run(args, cli);
    await waitFor(() => master.processed('hello').length > 0);
    expect(master.processed('hello')[0]).toMatchObject({ container_engine: null });
    await waitFor(() => cli.err.join('').includes('container tasks wait'));
    stop();
    expect(await exit).toBe(0);
  });

  it('refuses missing or unsafe settings with an input error', async () => {
    const noToken = io();
    expect(await run(['--url', master.url], noToken)).toBe(2);
    expect(noToken.err.join('')).toContain('no worker token');
    const plain = io({ GPU_BROKER_WORKER_TOKEN: 't' });
    expect(await run(['--url', 'http://gpu.example:80'], plain)).toBe(2);
    const gpus = io({ GPU_BROKER_WORKER_TOKEN: 't' });
    expect(await run(['--url', master.url, '--gpus', 'sim:0'], gpus)).toBe(2);
    expect(gpus.err.join('')).toContain('--gpus');
    const engine = io({ GPU_BROKER_WORKER_TOKEN: 't' });
    expect(await run(['--url', master.url, '--container-engine', 'lxc'], engine)).toBe(2);
    expect(engine.err.join('')).toContain('expected auto, podman, docker or none');
    // The worker id rule hello enforces (docs/state-machines.md): refused before connecting.
    for (const id of ['../../etc', 'gpu\u001bhost', 'w'.repeat(129)]) {
      const bad = io({ GPU_BROKER_WORKER_TOKEN: 't' });
      expect(await run(['--url', master.url, '--id', id], bad)).toBe(2);
      expect(bad.err.join('')).toContain('a worker id is 1 to 128 letters');
    }
  });

  it('attack: refuses to start with a mount inside a writable one, or one reached through a symbolic link', async () => {
    const scratch = join(dir, 'scratch');
    mkdirSync(join(scratch, 'models'), { recursive: true });
    symlinkSync('/run', join(dir, 'models-link'));
    const base = [
      '--url',
      master.url,
      '--gpus',
      'sim:1',
      '--data-dir',
      join(dir, 'd'),
      '--container-engine',
      'none',
    ];
    const nested = io({ GPU_BROKER_WORKER_TOKEN: 't' });
    const args = ['--mount', `scratch=${scratch}:rw`, '--mount', `models=${scratch}/models`];
    expect(await run([...base, ...args], nested)).toBe(2);
    expect(nested.err.join('')).toContain(`models=${scratch}/models lies inside the writable mount scratch`);
    const linked = io({ GPU_BROKER_WORKER_TOKEN: 't' });
    expect(await run([...base, '--mount', `models=${dir}/models-link`], linked)).toBe(2);
    expect(linked.err.join('')).toContain('resolves to /run');
    const inData = io({ GPU_BROKER_WORKER_TOKEN: 't' });
    expect(await run([...base, '--mount', `w=${dir}/d/executions`], inData)).toBe(2);
    expect(inData.err.join('')).toContain(`lies inside the hidden path ${dir}/d`);
  });
});
