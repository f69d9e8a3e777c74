import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ExecutionHandle, ExecutionResult } from '../../../../worker/executions/executor.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap } from '../../../../worker/sandbox/bwrap.js';
import { InputCache } from '../../../../worker/task-io/input-cache.js';
import type { FetchBlob } from '../../../../worker/task-io/input-fetch.js';
import { AdvancingClock } from '../../../support/advancing-clock.js';
import { makePlan, sh } from '../../../support/executor-plan.js';
import { bwrapSetupFor } from '../../../support/local-sandbox.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { waitFor } from '../../../support/wait.js';

/** Called as the executor takes its OOM baseline (after setup, before the spawn); passes through otherwise. */
const probeHook = vi.hoisted(() => ({ before: null as (() => void) | null }));
vi.mock('../../../../worker/local/process-group.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../../../../worker/local/process-group.js')>();
  return {
    ...actual,
    probeOomKills: async (pid: number | 'self') => {
      probeHook.before?.();
      return actual.probeOomKills(pid);
    },
  };
});

/**
 * Hostile review of ADR 0049 §5 (the backfill deadline): the deadline was only looked at once setup had
 * ended, so a setup still fetching its inputs when the deadline passed kept the backfilled task's cards
 * (its execution not done, no receipt for the master) for as long as the fetch took: the master's input
 * fetcher is bounded only by 120 s plus the size at 1 MiB/s (up to 1 GiB a file, some 17 minutes), far
 * past the 60 s start-up allowance the aged task was promised. Setup is now raced against the deadline.
 */

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'gpu-broker-deadline-setup-'));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

/** A master that sends nothing until the fetch's signal stops it; `signals` are those it was given. */
function stalledFetch(signals: AbortSignal[]) {
  return async (_e: string, _s: string, _m: number, _into: string, signal?: AbortSignal): Promise<void> => {
    if (signal === undefined) throw new Error('the fetch was given no signal');
    signals.push(signal);
    await new Promise<void>((_r, reject) => {
      signal.addEventListener('abort', () => reject(new Error('stopped part-way')), { once: true });
    });
  };
}

/**
 * Starts a run of `echo ran` with one input of `sha` fetched by `fetch`, stopped by `stop_within_seconds`
 * when given (a backfilled run), on `clock` when given.
 */
function runWithInput(
  sha: string,
  fetch: FetchBlob,
  more: { stopWithin?: number; clock?: AdvancingClock } = {},
): ExecutionHandle {
  const base = makePlan({ argv: sh('echo ran'), timeLimit: 600 });
  const plan = {
    ...base,
    ...(more.stopWithin === undefined ? {} : { stop_within_seconds: more.stopWithin }),
    spec: { ...base.spec, inputs: [{ path: 'data.bin', sha256: sha, size: 1 }] },
  };
  return startExecution(plan, {
    rootDir: root,
    workerId: 'worker-1',
    provider: 'sim',
    onLog: () => undefined,
    cleanupPollMs: 20,
    ...(more.clock === undefined ? {} : { clock: more.clock }),
    inputs: { cache: new InputCache(join(root, `cache-${sha.slice(0, 1)}`), 1 << 20), fetch },
  });
}

describe('a backfilled run whose setup is still going at its deadline', () => {
  it('ends TIMED_OUT at its deadline, not whenever its inputs arrive', async () => {
    const clock = new AdvancingClock();
    let release: () => void = () => undefined;
    const fetching = new Promise<void>((r) => {
      release = r;
    });
    let fetchStarted = false;
    // A slow master: the blob arrives only when the test lets it (then wrong, so setup fails).
    const slow = async () => {
      fetchStarted = true;
      await fetching;
      throw new Error('released by the test');
    };
    const handle = runWithInput('a'.repeat(64), slow, { stopWithin: 5, clock });
    let result: ExecutionResult | null = null;
    void handle.done.then((r) => {
      result = r;
    });
    try {
      await waitFor(() => fetchStarted, { what: 'setup fetching its input' });
      clock.advance(6_000);
      // The deadline has passed: the run must end now (TIMED_OUT), not when the fetch ends.
      const ended = await waitFor(() => result, { what: 'the run ending at its deadline', timeoutMs: 3_000 });
      expect(ended).toMatchObject({ failure_reason: 'TIMED_OUT', exit_code: null, cleaned: true });
      expect(ended.setup_error).toContain('still going at its deadline of 5 s');
      expect(await handle.started).toBeNull();
    } finally {
      release();
      await handle.done;
    }
  });

  it('stops its input fetch part-way at the deadline instead of letting it run to its own end', async () => {
    const clock = new AdvancingClock();
    const signals: AbortSignal[] = [];
    const handle = runWithInput('b'.repeat(64), stalledFetch(signals), { stopWithin: 5, clock });
    await waitFor(() => signals.length === 1, { what: 'setup fetching its input' });
    expect(signals[0]?.aborted).toBe(false);
    clock.advance(6_000);
    const ended = await handle.done;
    expect(ended).toMatchObject({ failure_reason: 'TIMED_OUT', exit_code: null });
    expect(signals[0]?.aborted).toBe(true);
  });
});

describe('a run cancelled while its setup fetches inputs', () => {
  it('stops the fetch part-way and ends CANCELLED, never SETUP_FAILED and never started', async () => {
    const signals: AbortSignal[] = [];
    const handle = runWithInput('c'.repeat(64), stalledFetch(signals));
    await waitFor(() => signals.length === 1, { what: 'setup fetching its input' });
    handle.cancel('the owner cancelled it');
    const ended = await handle.done;
    expect(signals[0]?.aborted).toBe(true);
    expect(ended).toMatchObject({ failure_reason: 'CANCELLED', exit_code: null });
    expect(await handle.started).toBeNull();
  });
});

const bwrap = await probeBwrap({ root: isRoot });
const uidsReady =
  requireOrSkip('bubblewrap', bwrap.ok && bwrap.bwrap !== null && bwrap.env !== null, bwrap.detail) &&
  requireOrSkip('root (a task uid of its own)', isRoot);

describe('a run cancelled after its setup, while the executor takes its OOM baseline', () => {
  it.runIf(uidsReady)('gives its task uid back, as a cancel during setup does', async () => {
    const dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-deadline-setup-uids-'));
    try {
      const sandbox = await bwrapSetupFor(bwrap, dataDir, {
        uids: { first: 2_000_590_000, last: 2_000_590_009 },
      });
      const uids = sandbox.uids;
      if (uids === null) throw new Error('a root worker has a uid pool');
      const plan = makePlan({ argv: sh('echo ran'), timeLimit: 600 });
      let cancel: () => void = () => undefined;
      probeHook.before = () => cancel();
      const handle = startExecution(plan, {
        rootDir: join(dataDir, 'executions'),
        workerId: 'worker-1',
        provider: 'sim',
        onLog: () => undefined,
        cleanupPollMs: 20,
        sandbox,
      });
      cancel = () => handle.cancel('the owner cancelled it');
      const ended = await handle.done;
      expect(ended).toMatchObject({ failure_reason: 'CANCELLED', exit_code: null });
      expect(await handle.started).toBeNull();
      expect(uids.inUse()).toBe(0);
    } finally {
      probeHook.before = null;
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
