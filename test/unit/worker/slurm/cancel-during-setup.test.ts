import { describe, expect, it } from 'vitest';
import type { SlurmBackend } from '../../../../worker/slurm/backend.js';
import type { SlurmDriver } from '../../../../worker/slurm/cli/driver.js';
import { startSlurmExecution } from '../../../../worker/slurm/executor.js';
import { InputCache } from '../../../../worker/task-io/input-cache.js';
import { makePlan } from '../../../support/executor-plan.js';
import { makeTempDir } from '../../../support/temp.js';
import { waitFor } from '../../../support/wait.js';

/**
 * A Slurm execution cancelled while its setup fetches the spec's inputs (as on a local worker,
 * worker/local/executor.ts): the fetch is stopped part-way, no job is submitted, and it ends CANCELLED,
 * never SETUP_FAILED because the stop made setup fail. The driver is a stand-in that must not be asked
 * for anything; the real Slurm runs in test/integration/cluster/slurm-backend.test.ts.
 */

describe('a Slurm execution cancelled during setup', () => {
  it('stops its input fetch part-way, submits nothing, and ends CANCELLED', async () => {
    const submitted: unknown[] = [];
    const driver = {
      commandPath: () => null,
      submit: async (req: unknown) => {
        submitted.push(req);
        return '1';
      },
    } as unknown as SlurmDriver;
    const backend: SlurmBackend = {
      driver,
      partition: 'gpu',
      extraArgs: [],
      jobDir: makeTempDir('slurm-cancel-setup'),
      sandbox: null,
      pollMs: 5,
    };
    const signals: AbortSignal[] = [];
    const base = makePlan({ argv: ['/bin/true'] });
    const plan = {
      ...base,
      spec: { ...base.spec, inputs: [{ path: 'data.bin', sha256: 'd'.repeat(64), size: 1 }] },
    };
    const h = startSlurmExecution(plan, {
      backend,
      clock: { now: () => Date.now() },
      workerId: 'w1',
      provider: {} as never,
      onLog: () => undefined,
      onJob: () => undefined,
      inputs: {
        cache: new InputCache(makeTempDir('slurm-cancel-setup-cache'), 1 << 20),
        // A master that sends nothing until the fetch's signal stops it.
        fetch: async (_e, _s, _m, _into, signal) => {
          if (signal === undefined) throw new Error('the fetch was given no signal');
          signals.push(signal);
          await new Promise<void>((_r, reject) => {
            signal.addEventListener('abort', () => reject(new Error('stopped part-way')), { once: true });
          });
        },
      },
    });
    await waitFor(() => signals.length === 1, { what: 'setup fetching its input' });
    h.cancel('the agent cancelled it');
    const exited = await h.exited;
    expect(signals[0]?.aborted).toBe(true);
    expect(exited).toMatchObject({ failure_reason: 'CANCELLED', exit_code: null });
    expect(submitted).toEqual([]);
    expect((await h.done).cleaned).toBe(true);
  });
});
