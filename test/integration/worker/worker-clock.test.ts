import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CardSample } from '../../../src/contracts/sample.js';
import { ManualClock } from '../../../src/platform/clock.js';
import { silentLogger } from '../../../src/platform/logger.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { OutboxSender } from '../../../worker/link/outbox.js';
import { startExecution } from '../../../worker/local/executor.js';
import { recoverUnfinished } from '../../../worker/local/recovery.js';
import type { CardSampler } from '../../../worker/samplers/card-sampler.js';
import { type LocalStore, openLocalStore } from '../../../worker/store/local-store.js';
import { type Chunk, makePlan, sh, text } from '../../support/executor-plan.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { seedExecution } from '../../support/worker-store.js';
import { type Harness, harness, plan, simUuid } from './daemon/daemon-harness.js';

/**
 * The worker takes its time from an injected Clock (ADR 0014): its time decisions follow the
 * clock it is given, not the wall clock, and no worker source reads the wall clock itself.
 */

const HOUR = 3600_000;

afterAll(() => removeTempDirs());

describe('worker sources', () => {
  it('never read the wall clock: time comes from the injected Clock (src/platform/clock.ts)', () => {
    const root = join(packageRoot(), 'worker');
    const files = (readdirSync(root, { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(20);
    const ambient = [
      /\bDate\.now\s*\(/,
      /\bnew\s+Date\b/,
      /(?<![.\w])Date\s*\(/,
      /\bperformance\s*\.\s*now\b/,
    ];
    const found: string[] = [];
    for (const file of files) {
      const code = readFileSync(join(root, file), 'utf8')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1');
      for (const re of ambient)
        if (re.test(code)) found.push(`${relative(packageRoot(), join(root, file))}: ${re}`);
    }
    expect(found).toEqual([]);
  });
});

describe('recovery deadlines follow the injected clock', () => {
  let store: LocalStore;
  beforeEach(() => {
    store = openLocalStore(':memory:', { clock: new ManualClock() });
  });
  afterEach(() => store.close());

  it('a lost execution whose cards stay busy is cleanup_failed when the clock, not the wall, passes the deadline', async () => {
    const clock = new ManualClock();
    const p = { ...plan({ argv: ['/bin/true'] }), cleanup_timeout_seconds: 3600 };
    const busy: CardSample = {
      index: 0,
      uuid: simUuid(0),
      model: 'Fake',
      memory_used_mib: 500,
      memory_total_mib: 1000,
      utilization_pct: 0,
      temperature_c: null,
      power_w: null,
      health: 'ok',
      health_reasons: [],
      processes: [],
      simulated: false,
    };
    let checks = 0;
    const sampler: CardSampler = {
      provider: 'nvidia',
      sample: async () => {
        checks += 1;
        return [busy];
      },
    };
    seedExecution(store, p, 'exited', { exit_code: 0, signal: null, failure_reason: null, outputs: [] });
    const outbox = new OutboxSender(
      store,
      'boot-1',
      { send: () => false, bufferedAmount: () => 0 },
      silentLogger(),
    );
    const abort = new AbortController();
    const done = recoverUnfinished({
      store,
      outbox,
      logger: silentLogger(),
      sampler,
      pollMs: 2,
      signal: abort.signal,
      clock,
    });
    try {
      // Many checks, all dirty, and the clock has not moved: the hour is not over, so no verdict yet.
      await waitFor(() => checks >= 20, { what: '20 cleanup checks' });
      expect(store.getExecution(p.execution_id)?.phase).toBe('exited');
      clock.advance(HOUR);
      await done;
      expect(store.getExecution(p.execution_id)).toMatchObject({
        phase: 'cleanup_failed',
        result: { cleaned: false, detail: expect.stringContaining('not clean after 3600s') },
      });
    } finally {
      abort.abort();
      await done;
    }
  });
});

describe('the executor time limit follows the injected clock', () => {
  it('a task inside its hour runs on; once the clock passes the hour it is TIMED_OUT', async () => {
    const clock = new ManualClock();
    const plan = makePlan({
      argv: sh('echo ready; while :; do sleep 0.1; done'),
      timeLimit: 3600,
      grace: 0.3,
    });
    const chunks: Chunk[] = [];
    const handle = startExecution(plan, {
      rootDir: makeTempDir('clock-exec'),
      workerId: 'w1',
      provider: 'sim',
      onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      clock,
    });
    let exited = false;
    void handle.exited.then(() => {
      exited = true;
    });
    expect(await handle.started).toBeGreaterThan(0);
    await waitFor(() => text(chunks, 'stdout') === 'ready\n', { what: 'the task running' });
    expect(exited).toBe(false);
    clock.advance(HOUR);
    expect(await handle.done).toMatchObject({ failure_reason: 'TIMED_OUT', cleaned: true });
  });
});

describe('the daemon with a manual clock', () => {
  let h: Harness;
  beforeEach(async () => {
    h = await harness();
  });
  afterEach(async () => {
    await h.dispose();
  });

  it('stamps samples with its time and prunes a finished directory only once that time says it is old', async () => {
    const clock = new ManualClock(Date.UTC(2030, 0, 1));
    await h.worker({
      clock,
      executionRetention: { keep_count: 0, keep_seconds: 3600 },
      executionPruneIntervalMs: 10,
    });
    await waitFor(() => h.master.connected());
    const p = plan({ argv: ['/bin/sh', '-c', 'echo hi'] });
    h.master.assign(p);
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      what: 'cleaned',
    });
    const samples = h.master.processed('sample');
    expect(samples.length).toBeGreaterThan(0);
    for (const s of samples) expect(s.sampled_at).toBe(Date.UTC(2030, 0, 1));

    // Many prune passes (every 10 ms) while five more samples (every 100 ms) arrive: the clock still
    // says the execution finished just now, so its directory stays.
    const dir = join(h.dir, 'data', 'executions', p.execution_id);
    const seen = h.master.processed('sample').length;
    await waitFor(() => h.master.processed('sample').length >= seen + 5, { what: 'five more samples' });
    expect(existsSync(dir)).toBe(true);

    clock.advance(2 * HOUR);
    await waitFor(() => !existsSync(dir), { what: 'the directory pruned once the clock moved' });
  });
});
