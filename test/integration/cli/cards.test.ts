import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as cards } from '../../../src/cli/operator/cards.js';
import { runCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { waitFor } from '../../support/wait.js';
import { startTestWorker, type TestWorker } from '../../support/worker.js';

/**
 * docs/operations.md: `cordon|uncordon|drain|undrain|remove-worker|reconcile` with several targets act on
 * every one, and a target that does not exist fails the command before any target is changed.
 */

let m: TestMaster;
let w: TestWorker;
let env: Record<string, string>;

const cordoned = () =>
  m.store.workers
    .cordons()
    .map((c) => `${c.worker_id}:${c.card_index}`)
    .sort();

beforeAll(async () => {
  m = await startTestMaster();
  w = await startTestWorker({
    url: m.url,
    caPem: m.caPem,
    token: m.createToken('w', ['worker'], 'gpu-a'),
    workerId: 'gpu-a',
    simCards: 3,
    isolation: 'none',
  });
  await waitFor(() => (m.store.workers.get('gpu-a')?.cards.length ?? 0) === 3);
  env = { GPU_BROKER_URL: m.url, GPU_BROKER_TOKEN: m.operatorToken, GPU_BROKER_CA_FILE: m.caCertPath ?? '' };
});

afterAll(async () => {
  await w?.close();
  await m?.close();
});

describe('commands with several targets', () => {
  it('cordon and uncordon act on every card named', async () => {
    const on = await runCli(cards, ['cordon', 'gpu-a:0', 'gpu-a:2', '--reason', 'test'], env);
    expect(on.code, on.stderr).toBe(0);
    expect(on.stdout).toBe('cordon gpu-a:0: ok\ncordon gpu-a:2: ok\n');
    expect(cordoned()).toEqual(['gpu-a:0', 'gpu-a:2']);
    const off = await runCli(cards, ['uncordon', 'gpu-a:0', 'gpu-a:2', '--json'], env);
    expect(off.code, off.stderr).toBe(0);
    expect(off.json<{ results: Array<{ target: string }> }>().results.map((r) => r.target)).toEqual([
      'gpu-a:0',
      'gpu-a:2',
    ]);
    expect(cordoned()).toEqual([]);
  });

  it('an unknown target among several changes nothing and names it', async () => {
    const out = await runCli(cards, ['cordon', 'gpu-a:1', 'gpu-a:7', 'nope:0'], env);
    expect(out.code).toBe(1);
    expect(out.stderr).toContain('gpu-a:7, nope:0');
    expect(out.stderr).toContain('nothing was changed');
    expect(cordoned()).toEqual([]);
    const drain = await runCli(cards, ['drain', 'gpu-a', 'gpu-b'], env);
    expect(drain.code).toBe(1);
    expect(drain.stderr).toContain('no such worker: gpu-b');
    expect(m.store.workers.get('gpu-a')?.draining).toBe(false);
  });

  it('drain and undrain act on every worker named', async () => {
    const w2 = await startTestWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('w2', ['worker'], 'gpu-b'),
      workerId: 'gpu-b',
      simCards: 1,
      isolation: 'none',
    });
    try {
      await waitFor(() => m.store.workers.get('gpu-b') !== undefined);
      expect((await runCli(cards, ['drain', 'gpu-a', 'gpu-b'], env)).code).toBe(0);
      expect(
        m.store.workers
          .list()
          .filter((x) => x.draining)
          .map((x) => x.id)
          .sort(),
      ).toEqual(['gpu-a', 'gpu-b']);
      expect((await runCli(cards, ['undrain', 'gpu-a', 'gpu-b'], env)).code).toBe(0);
      expect(m.store.workers.list().filter((x) => x.draining)).toEqual([]);
    } finally {
      await w2.close();
    }
  });

  it('bad or repeated targets are a one-line usage error', async () => {
    for (const argv of [
      ['cordon', 'gpu-a'],
      ['uncordon', 'gpu-a:0', 'gpu-a:0'],
      ['drain'],
      ['reconcile', 't1'],
    ]) {
      const out = await runCli(cards, argv, env);
      expect(out.code, argv.join(' ')).toBe(2);
      expect(out.stderr.trimEnd().split('\n')).toHaveLength(1);
    }
    expect(cordoned()).toEqual([]);
  });
});
