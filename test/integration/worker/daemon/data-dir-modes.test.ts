import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../../src/platform/logger.js';
import { secureWorkerDataDir } from '../../../../worker/daemon/data-dir-modes.js';
import { startWorker } from '../../../../worker/daemon/start-worker.js';
import type { ExecutorOptions } from '../../../../worker/local/executor.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { SimSampler } from '../../../../worker/samplers/sim-sampler.js';
import { resolveRunAs } from '../../../../worker/sandbox/run-as.js';
import { prepareSandbox } from '../../../../worker/sandbox/setup.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, sh, text } from '../../../support/executor-plan.js';
import { startTestMaster } from '../../../support/master.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { makeGateDir, makeTempDir, removeTempDirs } from '../../../support/temp.js';

// docs/security.md "The task sandbox" on the worker side, with real files, real workers and real task processes.

afterAll(() => removeTempDirs());

const mode = (path: string) => statSync(path).mode & 0o7777;
const rootOnly = requireOrSkip('root', isRoot, 'run the tests as root: task uids, chown and setpriv need it');

/** Starts a worker far from any master (it only dials): what start-up does to its data dir is the point. */
async function startIdleWorker(dataDir: string, extra: { runAs?: ReturnType<typeof resolveRunAs> } = {}) {
  return startWorker({
    masterUrl: 'http://127.0.0.1:9',
    token: 'gpb_unused',
    workerId: 'w-modes',
    dataDir,
    sampler: new SimSampler({ count: 1, seed: 'modes' }),
    logger: silentLogger(),
    firstSampleWaitMs: 0,
    ...extra,
  });
}

function run(
  plan: ReturnType<typeof makePlan>,
  opts: Omit<ExecutorOptions, 'workerId' | 'provider' | 'onLog'>,
) {
  const chunks: Chunk[] = [];
  const handle = startExecution(plan, {
    workerId: 'w-modes',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    ...opts,
  });
  return { done: handle.done, chunks };
}

describe('worker data dir modes', () => {
  it('tightens a loose data dir and worker.sqlite to 0700/0600', async () => {
    const dataDir = makeTempDir('wmodes');
    chmodSync(dataDir, 0o755);
    writeFileSync(join(dataDir, 'worker.sqlite'), '');
    chmodSync(join(dataDir, 'worker.sqlite'), 0o644);
    const worker = await startIdleWorker(dataDir);
    try {
      expect(mode(dataDir)).toBe(0o700);
      expect(mode(join(dataDir, 'worker.sqlite'))).toBe(0o600);
      expect(mode(join(dataDir, 'worker.sqlite-wal'))).toBe(0o600);
    } finally {
      await worker.close();
    }
  });

  it.runIf(rootOnly)(
    'row 6: --isolation none --run-as nobody on a 0700 data dir is refused at start, saying what to change',
    async () => {
      const dataDir = makeTempDir('wmodes');
      chmodSync(dataDir, 0o700);
      await expect(startIdleWorker(dataDir, { runAs: resolveRunAs('nobody') })).rejects.toMatchObject({
        code: 'INVALID_INPUT',
        message: expect.stringMatching(
          new RegExp(`--run-as nobody \\(uid 65534, gid \\d+\\) cannot traverse ${dataDir} \\(mode 0700`),
        ),
        hint: expect.stringContaining(`chmod o+x ${dataDir}`),
      });
      // Nothing was loosened behind the operator's back.
      expect(mode(dataDir)).toBe(0o700);
    },
  );

  it.runIf(rootOnly)(
    'row 6: a data dir the --run-as worker creates is 0711 and its task writes $GPU_BROKER_OUTPUT_DIR',
    async () => {
      const parent = makeTempDir('wmodes');
      chmodSync(parent, 0o711);
      const dataDir = join(parent, 'worker');
      const runAs = resolveRunAs('nobody');
      const worker = await startIdleWorker(dataDir, { runAs });
      await worker.close();
      expect(mode(dataDir)).toBe(0o711);
      expect(mode(join(dataDir, 'worker.sqlite'))).toBe(0o600);
      expect(secureWorkerDataDir(dataDir, runAs)).toEqual([]);
      const plan = makePlan({
        argv: sh(
          'id -u; echo ok > "$GPU_BROKER_OUTPUT_DIR/r.txt"; cat ../../../worker.sqlite || echo DENIED',
        ),
        outputs: [{ path: 'r.txt', required: true }],
      });
      const { done, chunks } = run(plan, { rootDir: join(dataDir, 'executions'), runAs });
      const result = await done;
      expect(result).toMatchObject({ exit_code: 0, failure_reason: null });
      expect(result.outputs.map((o) => o.path)).toEqual(['r.txt']);
      expect(text(chunks, 'stdout')).toMatch(/^65534\n/);
      expect(text(chunks, 'stdout')).toContain('DENIED');
    },
  );
});

describe('sandboxed tasks and 0700 data dirs', () => {
  it('a sandboxed task (its own uid) writes its output dir under a 0700 worker data dir', async () => {
    // Under /var/tmp, which the sandbox binds read-only, so only hiding and modes keep it out of reach.
    const dataDir = join(makeGateDir('wmodes-bwrap'), 'worker');
    mkdirSync(dataDir);
    secureWorkerDataDir(dataDir);
    expect(mode(dataDir)).toBe(0o700);
    const sandbox = await prepareSandbox({
      isolation: 'bwrap',
      dataDir,
      sampler: new SimSampler({ count: 1, seed: 'modes' }),
      taskUids: { first: 2_000_200_000, last: 2_000_200_009 },
      // A narrow fixed range: its own host counter, or earlier runs on this host would have used it up.
      taskUidRegistry: join(dataDir, '..', 'task-uids.next'),
    });
    const plan = makePlan({
      argv: sh('id -u; echo ok > "$GPU_BROKER_OUTPUT_DIR/r.txt"'),
      outputs: [{ path: 'r.txt', required: true }],
    });
    const { done, chunks } = run(plan, { rootDir: join(dataDir, 'executions'), sandbox: sandbox.setup });
    const result = await done;
    expect(result).toMatchObject({ exit_code: 0, failure_reason: null });
    expect(result.outputs.map((o) => o.path)).toEqual(['r.txt']);
    if (rootOnly) expect(Number(text(chunks, 'stdout').trim())).toBeGreaterThanOrEqual(2_000_200_000);
  });

  it('a sandboxed task cannot read the operator.token of a master on the same host', async () => {
    // A real master's data dir under /var/tmp (bound into sandboxes); `start` hides it the same way.
    const masterDir = join(makeGateDir('wmodes-master'), 'master');
    const m = await startTestMaster({ dataDir: masterDir });
    try {
      const tokenPath = join(masterDir, 'operator.token');
      const token = readFileSync(tokenPath, 'utf8').trim();
      const workerDir = join(makeGateDir('wmodes-worker'), 'worker');
      const sandbox = await prepareSandbox({
        isolation: 'bwrap',
        dataDir: workerDir,
        hiddenPaths: [masterDir],
        sampler: new SimSampler({ count: 1, seed: 'modes' }),
        taskUids: { first: 2_000_200_010, last: 2_000_200_019 },
        taskUidRegistry: join(workerDir, '..', 'task-uids.next'),
      });
      const plan = makePlan({
        argv: sh(
          `cat '${tokenPath}' || echo NO-TOKEN; ls -A '${masterDir}' | wc -l; cat '${masterDir}/broker.db' | wc -c`,
        ),
      });
      const { done, chunks } = run(plan, { rootDir: join(workerDir, 'executions'), sandbox: sandbox.setup });
      await done;
      const out = text(chunks, 'stdout') + text(chunks, 'stderr');
      expect(out).not.toContain(token);
      expect(text(chunks, 'stdout').trim().split('\n')).toEqual(['NO-TOKEN', '0', '0']);
    } finally {
      await m.close();
    }
  });
});
