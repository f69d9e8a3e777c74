import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../src/platform/logger.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startWorker } from '../worker/daemon/start-worker.js';
import { prepareSandbox } from '../worker/sandbox/setup.js';
import type { SlurmDriver } from '../worker/slurm/cli/driver.js';
import { slurmPoolSampler } from '../worker/slurm/sampler.js';
import { startChildMaster } from './child-master.js';
import { BenchClients, callTool, keySequence, proposeAndApprove, waitForCards } from './harness.js';

/**
 * The "through the broker" column of the Slurm bench (issue 12): the same 1-GPU jobs as
 * `measureBareSlurm` (bench/slurm.ts), but proposed, approved and admitted by a real master (its own
 * process, TLS) and submitted by a real `--backend slurm` worker over WSS. Each task's first instruction
 * writes its start time, as the bare jobs do, so both columns measure to the same event:
 *
 *  - approval → job start, one task at a time (the next is approved once the previous COMPLETED);
 *  - a burst: `burstJobs` tasks approved back to back; tasks admitted (started in Slurm) per second.
 *
 * Both ends of every interval are clocks of this host (the master's approved_at and the job's `date`).
 *
 * Measured 2026-12-02 on the shared 2-core dev machine, Slurm with default SchedulerParameters
 * (batch_sched_delay 3 s), 5 sequential and 16 burst jobs: bare submit → start p50 2.80 s, through the
 * broker approval → start p50 2.70 s (the difference is noise: Slurm's scheduler timer dominates and
 * the broker's proposal-to-sbatch path is tens of ms); burst of 16 on 8 GPUs: bare 7.7 s, through the
 * broker 10.9 s (the broker admits only what the pool has free, so the second half waits for the first
 * to finish and be reported, instead of queueing in Slurm).
 */

/** Options of {@link measureBrokerSlurm}. */
export interface BrokerSlurmOptions {
  driver: SlurmDriver;
  partition: string;
  sequentialJobs: number;
  burstJobs: number;
  /** The worker's poll interval (default 200 ms). */
  pollMs?: number;
  /**
   * Run each rank in bwrap on its node (ADR 0018), with the nodes' GPU device files here; absent: the
   * worker runs with `--isolation none`.
   */
  sandbox?: { gpuDevDir: string };
}

/** What {@link measureBrokerSlurm} measured (milliseconds). */
export interface BrokerSlurmResult {
  /** Approval → the job's first instruction, sequential tasks. */
  approvalToStartMs: number[];
  /** Burst: first approval → start of each task's job. */
  burstStartMs: number[];
  /** Burst: wall seconds from the first approval to the last start. */
  burstSeconds: number;
  sequentialSeconds: number;
}

/** Runs the broker column; cleans up its master, worker and files. */
export async function measureBrokerSlurm(o: BrokerSlurmOptions): Promise<BrokerSlurmResult> {
  const master = await startChildMaster({ executables: [{ path: '/bin/sh' }], require_isolation: false });
  const trusting = createCaTrustingFetch(master.caPem);
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-slurm-broker-'));
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-slurm');
  let worker: Awaited<ReturnType<typeof startWorker>> | null = null;
  try {
    const alice = await clients.connect(await master.createToken('bench-alice', ['submitter']));
    const rita = await clients.connect(await master.createToken('bench-rita', ['reviewer']));
    const workerId = `bench-slurm-${process.pid}`;
    const sampler = slurmPoolSampler({ driver: o.driver, partition: o.partition, workerId });
    const prepared =
      o.sandbox === undefined
        ? null
        : await prepareSandbox({
            isolation: 'bwrap',
            dataDir: join(dir, 'worker'),
            sampler,
            containerEngine: 'none',
          });
    const bwrap = prepared?.setup.kind === 'bwrap' ? prepared.setup : null;
    worker = await startWorker({
      masterUrl: master.url,
      token: await master.createToken('bench-worker', ['worker'], workerId),
      workerId,
      dataDir: join(dir, 'worker'),
      sampler,
      ca: master.caPem,
      logger: silentLogger(),
      sandbox: bwrap ?? { kind: 'none' },
      slurm: {
        backend: {
          driver: o.driver,
          partition: o.partition,
          extraArgs: [],
          jobDir: join(dir, 'jobs'),
          pollMs: o.pollMs ?? 200,
          sandbox:
            bwrap === null || o.sandbox === undefined
              ? null
              : { setup: bwrap, gpuDevDir: o.sandbox.gpuDevDir },
        },
        sampler,
      },
    });
    await waitForCards(
      alice,
      (cards) => cards.some((c) => c.worker_id === workerId && c.state === 'AVAILABLE'),
      20_000,
      'the bench Slurm worker never offered a GPU',
    );
    const nextKey = keySequence('sb');
    const spec = {
      title: 'slurm bench',
      objective: 'measure admission through the broker to Slurm',
      success_criteria: 'exits 0',
      cards: { count: 1 },
      // Into its own output dir: a sandboxed task sees nothing else of the host (the bench finds the
      // file under the job dir, jobs/<execution>/task/out/).
      runtime: {
        kind: 'process',
        argv: ['/bin/sh', '-c', 'date +%s%N > "$GPU_BROKER_OUTPUT_DIR/start.$GPU_BROKER_TASK_ID"'],
      },
      outputs: [],
      time_limit_seconds: 120,
      notes: 'benchmark task',
    };
    const approve = async (): Promise<{ taskId: string; approvedAt: number }> => {
      const taskId = await proposeAndApprove(alice, rita, spec, nextKey);
      const t = await callTool<{ task: { approved_at: string } }>(alice, 'get_task', { task_id: taskId });
      return { taskId, approvedAt: Date.parse(t.task.approved_at) };
    };
    const jobsDir = join(dir, 'jobs');
    const found = new Map<string, number>();
    const startOf = (taskId: string): number | null => {
      if (!found.has(taskId) && existsSync(jobsDir))
        for (const exec of readdirSync(jobsDir)) {
          const f = join(jobsDir, exec, 'task', 'out', `start.${taskId}`);
          if (!existsSync(f)) continue;
          const text = readFileSync(f, 'utf8').trim();
          if (text !== '') found.set(taskId, Number(BigInt(text) / 1_000_000n));
        }
      return found.get(taskId) ?? null;
    };
    const waitStarted = async (ids: string[], timeoutMs: number): Promise<void> => {
      const deadline = Date.now() + timeoutMs;
      while (!ids.every((id) => startOf(id) !== null)) {
        if (Date.now() > deadline) throw new Error(`tasks did not start within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const settled = async (taskId: string) => {
      const r = await callTool<{ task: { state: string }; timed_out: boolean }>(alice, 'wait_for_task', {
        task_id: taskId,
        timeout_seconds: 25,
      });
      if (r.timed_out || r.task.state !== 'COMPLETED')
        throw new Error(`task ${taskId} ended ${r.task.state}`);
    };

    const approvalToStartMs: number[] = [];
    const seq0 = performance.now();
    for (let i = 0; i < o.sequentialJobs; i++) {
      const a = await approve();
      await waitStarted([a.taskId], 60_000);
      approvalToStartMs.push((startOf(a.taskId) as number) - a.approvedAt);
      await settled(a.taskId);
    }
    const sequentialSeconds = (performance.now() - seq0) / 1000;
    const burst0 = Date.now();
    const burst: string[] = [];
    for (let i = 0; i < o.burstJobs; i++) burst.push((await approve()).taskId);
    await waitStarted(burst, 300_000);
    const burstStartMs = burst.map((id) => (startOf(id) as number) - burst0);
    for (const id of burst) await settled(id);
    return {
      approvalToStartMs,
      burstStartMs,
      burstSeconds: burstStartMs.length === 0 ? 0 : Math.max(...burstStartMs) / 1000,
      sequentialSeconds,
    };
  } finally {
    await clients.close();
    await worker?.close();
    await trusting.close();
    await master.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
