import { describe, expect, it } from 'vitest';
import type { SlurmJobReport } from '../../../../src/contracts/worker-protocol.js';
import { silentLogger } from '../../../../src/platform/logger.js';
import type { ExecutionManager } from '../../../../worker/executions/manager.js';
import { OutboxSender } from '../../../../worker/link/outbox.js';
import type { SlurmBackend } from '../../../../worker/slurm/backend.js';
import type { SlurmDriver } from '../../../../worker/slurm/cli/driver.js';
import type { SlurmJob } from '../../../../worker/slurm/cli/types.js';
import { jobMarker } from '../../../../worker/slurm/job-setup.js';
import { fenceSlurmJobs, recoverSlurmExecutions } from '../../../../worker/slurm/recovery.js';
import { type ExecutionRecord, openLocalStore } from '../../../../worker/store/local-store.js';
import { makePlan } from '../../../support/executor-plan.js';
import { slurmJob } from '../../../support/slurm-job.js';
import { seedExecution } from '../../../support/worker-store.js';

/**
 * Recovery and cluster fencing of a Slurm worker (worker/slurm/recovery.ts) over a real local store. The
 * cluster is a stand-in listing jobs (these paths decide from `jobs()` alone); the real Slurm runs them
 * in test/integration/cluster/slurm-backend.test.ts.
 */

const WORKER = 'w1';

function job(id: string, executionId: string, over: Partial<SlurmJob> = {}): SlurmJob {
  return slurmJob(id, {
    name: `gpu-broker-${executionId}`,
    comment: jobMarker(WORKER, executionId),
    ...over,
  });
}

function setup(jobs: SlurmJob[]) {
  const store = openLocalStore(':memory:');
  const outbox = new OutboxSender(
    store,
    'boot-1',
    { send: () => false, bufferedAmount: () => 0 },
    silentLogger(),
  );
  const cancelled: string[] = [];
  const driver = {
    jobs: async () => jobs,
    cancel: async (id: string) => {
      cancelled.push(id);
      return 'requested' as const;
    },
  } as unknown as SlurmDriver;
  const backend: SlurmBackend = {
    driver,
    partition: 'gpu',
    extraArgs: [],
    jobDir: '/nonexistent',
    sandbox: null,
    pollMs: 100,
  };
  const resumed: Array<{ record: ExecutionRecord; report: SlurmJobReport }> = [];
  const executions = {
    resume: (record: ExecutionRecord, report: SlurmJobReport) => resumed.push({ record, report }),
  } as unknown as ExecutionManager;
  const deps = { backend, store, outbox, executions, workerId: WORKER, logger: silentLogger() };
  const sent = () =>
    store
      .listUnackedOutbox()
      .map((e) => e.message as { phase?: string; failure_reason?: string; execution_id?: string });
  return { store, deps, cancelled, resumed, sent };
}

describe('Slurm worker recovery', () => {
  it('resumes by the recorded job id, finds an unrecorded job by its marker, and reports one that never reached Slurm', async () => {
    const recorded = makePlan({ argv: ['/bin/true'], executionId: 'exec-rec' });
    const unrecorded = makePlan({ argv: ['/bin/true'], executionId: 'exec-unrec' });
    const never = makePlan({ argv: ['/bin/true'], executionId: 'exec-never' });
    const t = setup([job('41', 'exec-unrec', { state: 'PENDING', reason: 'Priority', gpus: [] })]);
    for (const plan of [recorded, unrecorded, never]) seedExecution(t.store, plan, 'accepted');
    t.store.setExecutionSlurm('exec-rec', {
      job_id: '40',
      state: 'RUNNING',
      pending_reason: null,
      binding: null,
    });

    await recoverSlurmExecutions(t.deps);

    expect(t.resumed.map((r) => [r.record.execution_id, r.report.job_id])).toEqual([
      ['exec-rec', '40'],
      ['exec-unrec', '41'],
    ]);
    expect(t.store.getExecution('exec-unrec')?.slurm).toMatchObject({
      job_id: '41',
      pending_reason: 'Priority',
    });
    expect(t.store.getExecution('exec-never')?.phase).toBe('cleaned');
    const reports = t.sent().filter((m) => m.execution_id === 'exec-never');
    expect(reports.map((m) => [m.phase, m.failure_reason])).toEqual([
      ['exited', 'WORKER_LOST'],
      ['cleaned', 'WORKER_LOST'],
    ]);
  });

  it('one that never reached Slurm moves on from the phase its record holds (ADR 0014): started, or exited', async () => {
    const started = makePlan({ argv: ['/bin/true'], executionId: 'exec-started' });
    const exited = makePlan({ argv: ['/bin/true'], executionId: 'exec-exited' });
    const t = setup([]);
    seedExecution(t.store, started, 'started');
    seedExecution(t.store, exited, 'exited', {
      exit_code: null,
      signal: null,
      failure_reason: 'SETUP_FAILED',
      outputs: [],
    });

    await recoverSlurmExecutions(t.deps);

    expect(t.resumed).toEqual([]);
    const phases = (id: string) =>
      t
        .sent()
        .filter((m) => m.execution_id === id)
        .map((m) => [m.phase, m.failure_reason]);
    expect(phases('exec-started')).toEqual([
      ['exited', 'WORKER_LOST'],
      ['cleaned', 'WORKER_LOST'],
    ]);
    expect(phases('exec-exited')).toEqual([['cleaned', 'SETUP_FAILED']]);
    expect(t.store.getExecution('exec-exited')?.phase).toBe('cleaned');
  });
});

describe('Slurm cluster fencing', () => {
  it('scancels marked jobs of unknown or finished executions, and duplicates of a bound one; leaves its own', async () => {
    const live = makePlan({ argv: ['/bin/true'], executionId: 'exec-live' });
    const done = makePlan({ argv: ['/bin/true'], executionId: 'exec-done' });
    const t = setup([
      job('50', 'exec-live'),
      job('51', 'exec-live'),
      job('52', 'exec-done'),
      job('53', 'exec-unknown'),
      job('54', 'exec-x', { comment: 'someone-else' }),
      job('55', 'exec-unknown', { state: 'COMPLETED' }),
    ]);
    seedExecution(t.store, live, 'started');
    t.store.setExecutionSlurm('exec-live', {
      job_id: '50',
      state: 'RUNNING',
      pending_reason: null,
      binding: null,
    });
    seedExecution(t.store, done, 'cleaned');

    expect((await fenceSlurmJobs(t.deps)).sort()).toEqual(['51', '52', '53']);
    expect(t.cancelled.sort()).toEqual(['51', '52', '53']);
  });
});
