import { afterEach, describe, expect, it } from 'vitest';
import { run } from '../../../../src/cli/host/start.js';
import { runCli } from '../../../support/cli.js';
import { makeTempDir, removeTempDir } from '../../../support/temp.js';

// `gpu-broker start` says how its local worker runs container tasks (--container-engine, default auto).

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) removeTempDir(d);
});

async function startOnce(extra: string[]): Promise<string> {
  const dir = makeTempDir('start-container');
  dirs.push(dir);
  let stop!: () => void;
  const stopped = new Promise<void>((r) => (stop = r));
  const result = runCli(
    run,
    ['--data-dir', dir, '--gpus', 'sim:2', '--listen', '127.0.0.1:0', '--tls', 'off', ...extra],
    { GPU_BROKER_LOG_LEVEL: 'silent' },
    stopped,
  );
  // The banner is printed once master and worker run; stop right after.
  setTimeout(stop, 50);
  const r = await result;
  expect(r.code, r.stderr).toBe(0);
  return r.stderr;
}

describe('gpu-broker start --container-engine', () => {
  it('by default finds this machine’s podman and says so in the banner', { timeout: 30_000 }, async () => {
    const banner = await startOnce([]);
    // Said once: the label is "containers:", the line does not repeat it as "container tasks:".
    expect(banner).toMatch(/containers: +podman/);
    expect(banner).not.toContain('container tasks:');
  });

  it('with none, says container tasks wait', { timeout: 30_000 }, async () => {
    expect(await startOnce(['--container-engine', 'none'])).toMatch(/containers: +no container engine.*wait/);
  });

  it('refuses an unknown engine', { timeout: 30_000 }, async () => {
    const dir = makeTempDir('start-container');
    dirs.push(dir);
    const r = await runCli(run, ['--data-dir', dir, '--tls', 'off', '--container-engine', 'lxc'], {
      GPU_BROKER_LOG_LEVEL: 'silent',
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('expected auto, podman, docker or none');
  });
});
