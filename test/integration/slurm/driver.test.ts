import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { SlurmCommandError } from '../../../worker/slurm/cli/errors.js';
import { readBinding, readExit, writeJobFiles } from '../../../worker/slurm/cli/job-wrapper.js';
import { JOB_PATH } from '../../../worker/slurm/cli/rank-script.js';
import type { SlurmJob } from '../../../worker/slurm/cli/types.js';
import { ensureSlurm } from '../../support/slurm.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * The Slurm driver and job wrapper against the real local Slurm (test/support/slurm.ts).
 *
 * SLURM-EXCLUSIVE: one test takes all 8 GPUs of the shared node to see a pending reason, so this file
 * must not run beside other files that need GPUs of the shared Slurm (they would wait, not fail; this
 * one waits up to 3 minutes for the node to drain). Tests in a file run in order (vitest's default).
 */
const avail = ensureSlurm();
const TAG = `gbtest-drv-${process.pid}`;
const submitted: string[] = [];

describe.runIf(avail.ok)(
  avail.ok ? 'Slurm driver on the local Slurm' : (avail as { reason: string }).reason,
  () => {
    const slurm = avail.ok ? avail.slurm : (undefined as never);
    let driver: SlurmDriver;
    let root: string;
    /** The time-limit job's id, once its EndTime has been moved to now (see `startTimeoutJob`). */
    let timeoutJob: Promise<string>;

    async function submitWrapped(
      name: string,
      argv: string[],
      opts: { gpus?: number; time?: number; env?: Record<string, string>; tasks?: number } = {},
    ): Promise<{ id: string; dir: string }> {
      const dir = join(root, `${name}-${submitted.length}`);
      const f = await writeJobFiles({
        jobDir: dir,
        argv,
        ntasksPerNode: opts.tasks ?? 1,
        // The task's env travels in the job dir's task.env, never through sbatch.
        ...(opts.env !== undefined ? { taskEnv: { PATH: JOB_PATH, ...opts.env } } : {}),
      });
      const id = await driver.submit({
        scriptPath: f.script,
        stdout: f.stdout,
        stderr: f.stderr,
        chdir: dir,
        jobName: `${TAG}-${name}`,
        comment: TAG,
        partition: slurm.partition,
        ...(opts.gpus !== undefined ? { gpusPerNode: opts.gpus } : {}),
        ...(opts.tasks !== undefined ? { ntasksPerNode: opts.tasks } : {}),
        ...(opts.time !== undefined ? { timeLimitSeconds: opts.time } : {}),
      });
      submitted.push(id);
      return { id, dir };
    }

    async function until(id: string, pred: (j: SlurmJob) => boolean, timeoutMs = 60_000): Promise<SlurmJob> {
      return waitFor(
        async () => {
          const j = await driver.job(id);
          return j && pred(j) ? j : null;
        },
        { timeoutMs, intervalMs: 200, what: `job ${id}` },
      );
    }
    const ended = (j: SlurmJob) => ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT'].includes(j.state);

    /**
     * Slurm's limits are whole minutes and slurmctld looks for jobs past them every 30 s, so waiting for
     * the limit took 60–100 s. This drives Slurm's deadline instead: once the job runs, its EndTime
     * (start + limit) is moved to now, and slurmctld ends it at its next check as it does at the limit
     * (TIMEOUT, TimeLimit), the 1-minute limit unchanged. Started first, so that the up to 30 s until that
     * check pass while the other tests run. A plain batch script, not the wrapper: moving EndTime also
     * ends the wrapper's srun step at once, and the wrapper, exiting first, would make the job FAILED.
     */
    async function startTimeoutJob(): Promise<string> {
      const dir = join(root, 'timeout');
      mkdirSync(dir, { recursive: true });
      const script = join(dir, 'job.sh');
      writeFileSync(script, '#!/bin/sh\nexec sleep 600\n', { mode: 0o755 });
      const id = await driver.submit({
        scriptPath: script,
        stdout: join(dir, 'stdout.log'),
        stderr: join(dir, 'stderr.log'),
        chdir: dir,
        jobName: `${TAG}-timeout`,
        comment: TAG,
        partition: slurm.partition,
        timeLimitSeconds: 60,
      });
      submitted.push(id);
      await until(id, (j) => j.state === 'RUNNING', 120_000);
      execFileSync('scontrol', ['update', `JobId=${id}`, 'EndTime=now'], { env: slurm.env });
      return id;
    }

    beforeAll(async () => {
      root = makeTempDir('slurm-drv');
      // The worker's own environment must not reach the job.
      process.env.GB_LEAK_CANARY = 'leaked';
      driver = new SlurmDriver();
      timeoutJob = startTimeoutJob();
      // Awaited by its test; a failure before then must not be an unhandled rejection.
      timeoutJob.catch(() => undefined);
    });

    afterAll(async () => {
      for (const id of submitted) await driver.cancel(id).catch(() => undefined);
      removeTempDirs();
    });

    it('runs a 2-GPU job: binding.json has the job id, node and the GPU indices Slurm gave', async () => {
      const hostile = ["it's", '$(touch /tmp/pwned)', '`id`', '"q"', 'a\nb', '$HOME', '*', ''];
      const { id, dir } = await submitWrapped(
        'bind',
        [
          'bash',
          '-c',
          // biome-ignore lint/suspicious/noTemplateCurlyInString: a bash expansion, not a template
          'printf "<%s>" "$@"; echo; echo "canary=${GB_LEAK_CANARY-unset} foo=$FOO"; exit 3',
          'argv0',
          ...hostile,
        ],
        { gpus: 2, env: { FOO: 'a,b "c"' } },
      );
      const running = await until(id, (j) => j.state !== 'PENDING' || j.reason !== 'Priority', 120_000);
      const binding = await waitFor(() => readBinding(dir), {
        timeoutMs: 120_000,
        intervalMs: 100,
        what: 'binding.json',
      });
      expect(binding).toMatchObject({
        job_id: id,
        nodes: slurm.nodes,
        world_size: 1,
        ntasks_per_node: 1,
        gpu_source: 'probe',
      });
      expect(binding.per_node).toHaveLength(1);
      expect(binding.per_node[0]?.node).toBe('localhost');
      expect(binding.per_node[0]?.gpus).toHaveLength(2);
      expect(binding.per_node[0]?.cuda_visible_devices).toBe(binding.per_node[0]?.gpus.join(','));
      expect(binding.master_addr).toBe('127.0.0.1');
      if (running.state === 'RUNNING') expect(running.gpus[0]?.indices).toEqual(binding.per_node[0]?.gpus);

      const done = await until(id, ended);
      expect(done).toMatchObject({ state: 'FAILED', exitCode: 3, signal: null, nodes: ['localhost'] });
      expect(await readExit(dir)).toMatchObject({ job_id: id, exit_code: 3 });
      const out = readFileSync(join(dir, 'stdout.log'), 'utf8');
      expect(out).toContain(hostile.map((w) => `<${w}>`).join(''));
      expect(out).toContain('canary=unset foo=a,b "c"');
    });

    it("reports a foreign job's GPUs on the node, with its id and comment", async () => {
      const foreign = execFileSync(
        'sbatch',
        [
          '--parsable',
          `--job-name=${TAG}-foreign`,
          '--comment=someone else',
          '--gres=gpu:3',
          '--output=/dev/null',
          '--wrap',
          'sleep 300',
        ],
        { env: slurm.env, encoding: 'utf8' },
      ).trim();
      submitted.push(foreign);
      const job = await until(foreign, (j) => j.state === 'RUNNING', 180_000);
      const nodes = await driver.nodes(slurm.partition);
      const node = nodes.find((n) => n.name === 'localhost');
      expect(node).toBeDefined();
      expect(node?.gpus).toBe(8);
      const holder = node?.holders.find((h) => h.jobId === foreign);
      expect(holder).toEqual({
        jobId: foreign,
        name: `${TAG}-foreign`,
        comment: 'someone else',
        indices: job.gpus[0]?.indices,
      });
      expect(holder?.indices).toHaveLength(3);
      for (const i of holder?.indices ?? []) expect(node?.usedGpuIndices).toContain(i);
      expect(node?.gpusUsed).toBeGreaterThanOrEqual(3);
      expect(await driver.cancel(foreign)).toBe('requested');
      expect((await until(foreign, ended)).state).toBe('CANCELLED');
      expect(await driver.cancel(foreign)).toBe('ended');
    });

    it("shows Slurm's pending reason when all GPUs are taken, and cancel ends both jobs", async () => {
      const holder = await submitWrapped('hold8', ['sleep', '600'], { gpus: 8 });
      await until(holder.id, (j) => j.state === 'RUNNING', 180_000);
      const waiting = await submitWrapped('wait1', ['true'], { gpus: 1 });
      const pending = await until(
        waiting.id,
        (j) => j.state === 'PENDING' && j.reason !== null && j.reason !== 'None',
      );
      expect(pending.reason).toMatch(/^(Resources|Priority)$/);
      expect(pending.nodes).toEqual([]);
      expect(pending.startTime).toBeNull();
      expect(await readBinding(waiting.dir)).toBeNull();

      expect(await driver.cancel(waiting.id)).toBe('requested');
      expect(await driver.cancel(holder.id)).toBe('requested');
      // Slurm's state is the answer (the wrapper may or may not have written exit.json in KillWait)
      expect((await until(holder.id, ended)).state).toBe('CANCELLED');
      expect((await until(waiting.id, ended)).state).toBe('CANCELLED');
    });

    it("signals the task without cancelling the job (scancel --signal): the wrapper records the task's exit", async () => {
      const { id, dir } = await submitWrapped('signal', [
        'bash',
        '-c',
        'trap "echo got-term; exit 7" TERM; echo ready; while :; do sleep 0.2; done',
      ]);
      await waitFor(() => readFileSync(join(dir, 'stdout.log'), 'utf8').includes('ready'), {
        timeoutMs: 120_000,
        intervalMs: 100,
        what: 'task ready',
      });
      expect(await driver.cancel(id, 'TERM')).toBe('requested');
      const done = await until(id, ended);
      expect(readFileSync(join(dir, 'stdout.log'), 'utf8')).toContain('got-term');
      expect(done).toMatchObject({ state: 'FAILED', exitCode: 7 });
      expect(await readExit(dir)).toMatchObject({ exit_code: 7 });
    });

    it('unknown ids: job() is null, cancel says unknown, lookupEnded says lost', async () => {
      expect(await driver.job('999999')).toBeNull();
      expect(await driver.cancel('999999')).toBe('unknown');
      const lost = await driver.lookupEnded('999999');
      expect(lost.kind).toBe('lost');
    });

    it('finds an ended job in the jobcomp log', async () => {
      const { id } = await submitWrapped('comp', ['true']);
      await until(id, ended);
      const r = await waitFor(
        async () => {
          const x = await driver.lookupEnded(id);
          return x.kind === 'ended' ? x : null;
        },
        { timeoutMs: 10_000, what: 'jobcomp record' },
      );
      expect(r).toMatchObject({
        source: 'jobcomp',
        job: { id, state: 'COMPLETED', exitCode: 0, nodes: ['localhost'] },
      });
    });

    it("a refused submission is a SlurmCommandError with sbatch's stderr", async () => {
      const dir = join(root, 'badpart');
      const f = await writeJobFiles({ jobDir: dir, argv: ['true'] });
      const err = await driver
        .submit({
          scriptPath: f.script,
          stdout: f.stdout,
          stderr: f.stderr,
          chdir: dir,
          jobName: TAG,
          comment: TAG,
          partition: 'no-such-partition',
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SlurmCommandError);
      expect((err as SlurmCommandError).stderr).toMatch(/invalid partition/i);
      expect((err as SlurmCommandError).kind).toBe('exit');
    });

    it('ends a job at its time limit: TIMEOUT', async () => {
      const id = await timeoutJob;
      const j = await until(id, ended, 60_000);
      expect(j).toMatchObject({ state: 'TIMEOUT', reason: 'TimeLimit', timeLimitSeconds: 60 });
    });
  },
  400_000,
);
