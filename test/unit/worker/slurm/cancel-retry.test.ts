import { describe, expect, it } from 'vitest';
import type { SlurmBackend } from '../../../../worker/slurm/backend.js';
import type { SlurmDriver } from '../../../../worker/slurm/cli/driver.js';
import type { SlurmJob } from '../../../../worker/slurm/cli/types.js';
import { startSlurmExecution } from '../../../../worker/slurm/executor.js';
import { makePlan } from '../../../support/executor-plan.js';
import { slurmJob } from '../../../support/slurm-job.js';
import { makeTempDir } from '../../../support/temp.js';

/**
 * A cancel whose scancel fails (slurmctld busy) is not lost: while Slurm still reports the job live the
 * executor scancels it again (every SCANCEL_RETRY_MS on the worker's clock), and the task ends CANCELLED.
 * Seen in CI under load: a cancelled Slurm task stayed RUNNING past 60 s. The driver is a stand-in that
 * fails the first scancel; the real Slurm runs cancel in test/integration/cluster/slurm-backend.test.ts.
 */

const job = (id: string, state: SlurmJob['state']) => slurmJob(id, { state, rawState: state });

describe('Slurm cancel', () => {
  it('scancels again while the job stays live after a failed scancel, and ends CANCELLED', async () => {
    let now = 1_000_000;
    let state: SlurmJob['state'] = 'RUNNING';
    const cancels: number[] = [];
    const driver = {
      job: async (id: string) => {
        now += 2_000; // each poll moves the worker's clock on by 2 s
        return job(id, state);
      },
      cancel: async () => {
        cancels.push(now);
        if (cancels.length === 1) throw new Error('slurmctld busy: Socket timed out');
        state = 'CANCELLED';
        return 'requested' as const;
      },
      lookupEnded: async () => ({ kind: 'lost' as const, detail: 'not used' }),
    } as unknown as SlurmDriver;
    const backend: SlurmBackend = {
      driver,
      partition: 'gpu',
      extraArgs: [],
      jobDir: makeTempDir('slurm-cancel-retry'),
      sandbox: null,
      pollMs: 5,
    };
    const plan = makePlan({ argv: ['/bin/true'] });
    const h = startSlurmExecution(plan, {
      backend,
      clock: { now: () => now },
      workerId: 'w1',
      provider: {} as never,
      onLog: () => undefined,
      onJob: () => undefined,
      resume: {
        job_id: '42',
        state: 'RUNNING',
        pending_reason: null,
        binding: { nodes: [{ node: 'n1', gpus: [0] }] },
      },
    });
    h.cancel('the agent cancelled it');
    const exited = await h.exited;
    expect(exited.failure_reason).toBe('CANCELLED');
    expect(cancels).toHaveLength(2);
    expect(cancels[1]! - cancels[0]!).toBeGreaterThanOrEqual(5_000);
    expect((await h.done).cleaned).toBe(true);
  });
});
