import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SlurmDriver } from '../worker/slurm/cli/driver.js';
import { measureBrokerSlurm } from './slurm-broker.js';
import { type BenchSection, type OpResult, percentile, summarise } from './stats.js';

/**
 * Bare Slurm on this machine, the baseline for the Slurm backend: how long `sbatch --parsable` takes,
 * how long from the submit call to the job's first instruction (submit → start), and how many 1-GPU
 * jobs a burst starts per second. Uses the Slurm that answers `sinfo -p $BENCH_SLURM_PARTITION` (default
 * `gpu`; start one with scripts/slurm/start-local-slurm.sh, SLURM_CPUS=16 and
 * SLURM_EXTRA_CONF=SchedulerParameters=batch_sched_delay=0 as the tests do); skips with a line saying so
 * when none answers. BENCH_SLURM_SEQUENTIAL (10) and BENCH_SLURM_BURST (32) size it.
 *
 * Measured 2026-12-01 on the shared 2-core dev machine (load ≈ 14, Slurm with default
 * SchedulerParameters, i.e. batch_sched_delay 3 s): sbatch call p50 36 ms; submit → start p50 2.1 s,
 * p95 4.0 s; a burst of 64 started at 1.5 jobs/s. See docs/slurm.md.
 *
 * Start times come from the job itself (`date +%s%N` as its first command, same host clock), so the
 * measurement does not depend on a polling interval. The job scripts are plain sbatch scripts, not the
 * broker's job wrapper (whose own srun probe adds a step): the "through the broker" column belongs
 * beside these rows, measured with {@link measureBareSlurm}'s options on the same Slurm in the same run.
 */

/** Options of {@link measureBareSlurm}. */
export interface BareSlurmOptions {
  driver: SlurmDriver;
  partition: string;
  /** Jobs submitted one after the other, each waited for until it started. */
  sequentialJobs: number;
  /** Jobs submitted at once (the burst). */
  burstJobs: number;
  /** GPUs per job (`--gres=gpu:N`), default 1. */
  gpusPerJob?: number;
  /** Job name tag (jobs are cancelled at the end by id). */
  tag: string;
}

/** What {@link measureBareSlurm} measured (milliseconds). */
export interface BareSlurmResult {
  /** Duration of each `sbatch --parsable` call (sequential and burst). */
  submitCallMs: number[];
  /** Submit call start → job's first instruction, sequential jobs. */
  submitToStartMs: number[];
  /** Burst: submit of the first → start of each job. */
  burstStartMs: number[];
  /** Burst: wall seconds from the first submit to the last start. */
  burstSeconds: number;
  /** Seconds spent in the sequential part. */
  sequentialSeconds: number;
}

/** Measures bare sbatch submit latency, submit → start, and a burst; cancels its jobs at the end. */
export async function measureBareSlurm(o: BareSlurmOptions): Promise<BareSlurmResult> {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-slurm-'));
  const ids: string[] = [];
  const script = join(dir, 'job.sh');
  // first instruction: the start timestamp (ns since epoch); then end at once
  writeFileSync(script, `#!/bin/sh\ndate +%s%N > "${dir}/start.$SLURM_JOB_ID"\n`, { mode: 0o755 });
  const submit = async (n: number): Promise<{ id: string; t0: number; callMs: number }> => {
    const t0 = Date.now();
    const p0 = performance.now();
    const id = await o.driver.submit({
      scriptPath: script,
      stdout: '/dev/null',
      stderr: '/dev/null',
      chdir: dir,
      jobName: `${o.tag}-${n}`,
      comment: o.tag,
      partition: o.partition,
      gpusPerNode: o.gpusPerJob ?? 1,
      timeLimitSeconds: 120,
    });
    ids.push(id);
    return { id, t0, callMs: performance.now() - p0 };
  };
  const startOf = (id: string): number | null => {
    try {
      return Number(BigInt(readFileSync(join(dir, `start.${id}`), 'utf8').trim()) / 1_000_000n);
    } catch {
      return null;
    }
  };
  const waitStarted = async (want: string[], timeoutMs: number): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const have = new Set(readdirSync(dir));
      if (want.every((id) => have.has(`start.${id}`) && startOf(id) !== null)) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`jobs did not start within ${timeoutMs} ms`);
  };
  try {
    const submitCallMs: number[] = [];
    const submitToStartMs: number[] = [];
    const seq0 = performance.now();
    for (let i = 0; i < o.sequentialJobs; i++) {
      const s = await submit(i);
      submitCallMs.push(s.callMs);
      await waitStarted([s.id], 60_000);
      submitToStartMs.push((startOf(s.id) as number) - s.t0);
    }
    const sequentialSeconds = (performance.now() - seq0) / 1000;
    const burst0 = Date.now();
    const burst = [];
    for (let i = 0; i < o.burstJobs; i++) burst.push(await submit(o.sequentialJobs + i));
    for (const b of burst) submitCallMs.push(b.callMs);
    await waitStarted(
      burst.map((b) => b.id),
      300_000,
    );
    const starts = burst.map((b) => (startOf(b.id) as number) - burst0);
    return {
      submitCallMs,
      submitToStartMs,
      burstStartMs: starts,
      burstSeconds: Math.max(...starts) / 1000,
      sequentialSeconds,
    };
  } finally {
    for (const id of ids) await o.driver.cancel(id).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

function slurmAnswers(partition: string): string | null {
  try {
    const out = execFileSync('sinfo', ['-h', '-p', partition, '-o', '%t'], {
      encoding: 'utf8',
      timeout: 10_000,
    });
    return out.trim() === '' ? `partition ${partition} has no nodes` : null;
  } catch (err) {
    return `no Slurm answering sinfo -p ${partition} (${(err as Error).message.split('\n')[0]})`;
  }
}

const SEQUENTIAL = Number(process.env.BENCH_SLURM_SEQUENTIAL ?? 10);

/** Where the nodes' GPU device files are: BENCH_SLURM_GPU_DEV_DIR, else the test Slurm's, else /dev. */
function gpuDevDir(): string {
  const fromEnv = process.env.BENCH_SLURM_GPU_DEV_DIR;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  return existsSync('/tmp/slurm-local/dev/nvidia0') ? '/tmp/slurm-local/dev' : '/dev';
}
const BURST = Number(process.env.BENCH_SLURM_BURST ?? 32);

/** The `slurm` bench section (bare Slurm baseline). */
export const slurmSection: BenchSection = {
  name: 'slurm',
  description: `bare Slurm and the same jobs through the broker: sbatch call, submit/approval → job start (${SEQUENTIAL} sequential 1-GPU jobs), burst of ${BURST} 1-GPU jobs`,
  async run(): Promise<OpResult[]> {
    const partition = process.env.BENCH_SLURM_PARTITION ?? 'gpu';
    const why = slurmAnswers(partition);
    if (why !== null) {
      console.log(`skipped: ${why}; start one with scripts/slurm/start-local-slurm.sh (as root)`);
      return [];
    }
    const driver = new SlurmDriver();
    const sched = (await driver.config()).get('SchedulerParameters') ?? '?';
    const r = await measureBareSlurm({
      driver,
      partition,
      sequentialJobs: SEQUENTIAL,
      burstJobs: BURST,
      tag: `gb-bench-${process.pid}`,
    });
    const b = await measureBrokerSlurm({
      driver,
      partition,
      sequentialJobs: SEQUENTIAL,
      burstJobs: BURST,
    });
    // The same sequential tasks with every rank in bwrap on its node (ADR 0018): what the sandbox costs.
    const s = await measureBrokerSlurm({
      driver,
      partition,
      sequentialJobs: SEQUENTIAL,
      burstJobs: 0,
      sandbox: { gpuDevDir: gpuDevDir() },
    });
    const median = (xs: number[]) =>
      percentile(
        [...xs].sort((a, c) => a - c),
        50,
      );
    const p95 = (xs: number[]) =>
      percentile(
        [...xs].sort((a, b) => a - b),
        95,
      ).toFixed(0);
    const callSeconds = r.submitCallMs.reduce((a, b) => a + b, 0) / 1000;
    return [
      summarise(
        'slurm',
        'bare sbatch --parsable call',
        r.submitCallMs,
        0,
        callSeconds,
        `p95 ${p95(r.submitCallMs)} ms; calls/s = back-to-back submissions`,
      ),
      summarise(
        'slurm',
        'bare submit → job start',
        r.submitToStartMs,
        0,
        r.sequentialSeconds,
        `p95 ${p95(r.submitToStartMs)} ms; one job at a time; SchedulerParameters=${sched}`,
      ),
      summarise(
        'slurm',
        `bare burst of ${BURST}: submit → start`,
        r.burstStartMs,
        0,
        r.burstSeconds,
        `p95 ${p95(r.burstStartMs)} ms; calls/s = jobs started per second`,
      ),
      // Through the broker, on the same Slurm in the same run (bench/slurm-broker.ts).
      summarise(
        'slurm',
        'through the broker: approval → job start',
        b.approvalToStartMs,
        0,
        b.sequentialSeconds,
        `p95 ${p95(b.approvalToStartMs)} ms; broker adds p50 ${(median(b.approvalToStartMs) - median(r.submitToStartMs)).toFixed(0)} ms over bare submit → start`,
      ),
      summarise(
        'slurm',
        'through the broker, sandboxed ranks: approval → job start',
        s.approvalToStartMs,
        0,
        s.sequentialSeconds,
        `p95 ${p95(s.approvalToStartMs)} ms; bwrap on the node adds p50 ${(median(s.approvalToStartMs) - median(b.approvalToStartMs)).toFixed(0)} ms over unsandboxed`,
      ),
      summarise(
        'slurm',
        `through the broker: burst of ${BURST} approvals → start`,
        b.burstStartMs,
        0,
        b.burstSeconds,
        `p95 ${p95(b.burstStartMs)} ms; calls/s = tasks admitted to Slurm and started per second`,
      ),
    ];
  },
};
