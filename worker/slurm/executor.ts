import { stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import {
  DEFAULT_MAX_LOG_BYTES_PER_TASK,
  type ExecutionPlan,
  type SlurmBinding,
  type SlurmJobReport,
} from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { ExecutionExit, ExecutionHandle, ExecutionResult } from '../executions/executor.js';
import { exitWithoutTask } from '../executions/executor.js';
import { LogBudget } from '../task-io/log-budget.js';
import { collectOutputs } from '../task-io/outputs.js';
import type { SlurmExecutionOptions } from './backend.js';
import { jobFiles, readBinding, readExit, readSetupErrors } from './cli/job-wrapper.js';
import type { SlurmJob, SlurmJobState } from './cli/types.js';
import { type EndedJob, JobLogTail, slurmExit } from './job-outcome.js';
import { prepareSlurmJob } from './job-setup.js';

/**
 * Runs one ExecutionPlan as a Slurm batch job (docs/decisions/0013-slurm-backend.md). It has the local
 * executor's handle (the port in executions/executor.ts), so the daemon reports phases, logs, outputs and
 * the cleanup receipt the same way; only where the task runs differs.
 *
 * Layout of one execution, under the operator's shared `--slurm-job-dir`:
 *
 *   <jobDir>/<execution_id>/   0700, written by the worker and by the job (same user)
 *     job.sh, stdout.log, stderr.log, binding.json, exit.json   (worker/slurm/cli/job-wrapper.ts)
 *     task/                    the job's cwd and HOME
 *       out/                   $GPU_BROKER_OUTPUT_DIR
 *       tmp/                   TMPDIR
 *
 * Steps:
 *   1. setup: refuse what a Slurm job cannot honour (container runtime; mounts without a sandbox); write the
 *      wrapper; build the env from nothing (the slot indexes of the lease are not devices, so no
 *      CUDA_VISIBLE_DEVICES of ours: Slurm sets it).
 *   2. sbatch (`--gres=gpu:N`, `--nodes`/`--ntasks-per-node` for `cards.per_node`, `--time` rounded up to
 *      minutes, the operator's fixed partition/account/qos/extra args, a comment marker naming the
 *      worker and the execution) → `onJob(accepted)` with the job id, recorded before anything else.
 *   3. poll every `pollMs`: while it pends, Slurm's reason (re-reported when it changes); once it runs,
 *      the binding (Slurm's own per-node GPU indices, else the wrapper's binding.json) → `onJob(started)`;
 *      stdout/stderr tailed by offset; the broker's own time limit from the start (Slurm's `--time` is
 *      whole minutes), which scancels with TIMED_OUT.
 *   4. the job ended (a terminal state, or unknown to slurmctld): logs drained, outputs collected with
 *      the local executor's confinement rules, the verdict from exit.json / Slurm's state → `exited`.
 *   5. cleanup receipt: Slurm no longer lists the job as COMPLETING (it owns the GPUs, so the job being
 *      over is the receipt) → `done`.
 * Cancel: scancel (again every SCANCEL_RETRY_MS while Slurm still reports the job live), and CANCELLED
 * once Slurm says the job ended. `detach` (worker stopping) stops polling
 * and leaves the job to the next worker process, which resumes it by job id.
 */

/** A Slurm execution's handle: the port's, with `detach` always there (a job outlives the worker). */
export interface SlurmExecutionHandle extends ExecutionHandle {
  /** Stops polling without touching the job (the worker is stopping; its next process resumes the job). */
  detach(): void;
}

/** States in which a job still holds (or may still take) its GPUs. */
const LIVE_STATES: ReadonlySet<SlurmJobState> = new Set([
  'PENDING',
  'CONFIGURING',
  'RUNNING',
  'SUSPENDED',
  'COMPLETING',
  'REQUEUED',
  'RESIZING',
  'STOPPED',
]);
const WAITING_STATES: ReadonlySet<SlurmJobState> = new Set(['PENDING', 'REQUEUED']);

/** Whether a job is still live in Slurm (holds or may take GPUs). */
export function jobIsLive(job: SlurmJob): boolean {
  return LIVE_STATES.has(job.state);
}

/** Starts (or resumes) `plan` as a Slurm job; returns at once. */
export function startSlurmExecution(plan: ExecutionPlan, opts: SlurmExecutionOptions): SlurmExecutionHandle {
  const run = new SlurmRun(plan, opts);
  return {
    executionId: plan.execution_id,
    pid: undefined,
    // The daemon's pgid bookkeeping does not apply: the `started` report goes through onJob, with the binding.
    started: Promise.resolve(null),
    exited: run.exited,
    done: run.done,
    cancel: (reason, opts) => run.cancel(reason, opts),
    detach: () => run.detach(),
  };
}

/** What `run` returns on when the worker is stopping: the job is left to the next worker process. */
const DETACHED = Symbol('detached');

/** A failed or lost scancel (slurmctld busy, the job still launching) is repeated this often; harmless. */
const SCANCEL_RETRY_MS = 5_000;

class SlurmRun {
  readonly exited: Promise<ExecutionExit>;
  readonly done: Promise<ExecutionResult>;
  private resolveExited!: (exit: ExecutionExit) => void;
  private readonly execDir: string;
  private jobId: string | null = null;
  private report: SlurmJobReport | null = null;
  private cancelRequested = false;
  /** Stops setup's input fetches part-way when a cancel comes during setup. */
  private readonly setupStop = new AbortController();
  private killReason: 'TIMED_OUT' | 'CANCELLED' | 'PREEMPTED' | null = null;
  private lastScancelAt: number | null = null;
  private detached = false;
  private startedAt: number | null = null;
  private resumedStart = false;
  private readonly logs: JobLogTail;
  private wake: (() => void) | null = null;

  constructor(
    private readonly plan: ExecutionPlan,
    private readonly opts: SlurmExecutionOptions,
  ) {
    this.execDir = resolve(opts.backend.jobDir, plan.execution_id);
    const cap = new LogBudget(opts.maxLogBytes ?? DEFAULT_MAX_LOG_BYTES_PER_TASK);
    this.logs = new JobLogTail(jobFiles(this.execDir), opts.onLog, cap);
    this.exited = new Promise((r) => {
      this.resolveExited = r;
    });
    const uids = opts.backend.sandbox?.setup.uids ?? null;
    this.done = this.run()
      .catch((err: unknown) => this.internalFailure(err))
      .finally(() => uids?.release(plan.execution_id));
  }

  cancel(_reason: string, opts?: { readonly preempt?: boolean }): void {
    this.cancelRequested = true;
    // A preemption's grace is Slurm's (scancel: SIGTERM, KillWait, SIGKILL).
    if (this.killReason === null) this.killReason = opts?.preempt === true ? 'PREEMPTED' : 'CANCELLED';
    this.setupStop.abort();
    if (this.jobId !== null) void this.scancel();
    this.wake?.();
  }

  detach(): void {
    this.detached = true;
    this.wake?.();
  }

  private async run(): Promise<ExecutionResult> {
    const { resume } = this.opts;
    const submitted = resume !== undefined ? await this.resume(resume) : await this.setupAndSubmit();
    if (typeof submitted !== 'string') return submitted;
    const jobId = submitted;
    // 3. poll
    const job = await this.pollUntilEnded(jobId);
    if (job === DETACHED) return new Promise<ExecutionResult>(() => undefined);
    // 4. ended: drain, collect, judge
    const { exited, state } = await this.judge(jobId, job);
    this.resolveExited(exited);
    // 5. receipt: the job is over in Slurm (not COMPLETING any more)
    if ((await this.awaitReceipt(jobId)) === DETACHED) return new Promise<ExecutionResult>(() => undefined);
    return {
      ...exited,
      cleaned: true,
      cleanup_detail: `Slurm job ${jobId} has ended (${state === 'UNKNOWN_TO_SLURM' ? 'no longer known to slurmctld' : state}); its GPUs are Slurm's again`,
    };
  }

  /** Takes over the job a previous worker process submitted; returns its id. */
  private async resume(resume: SlurmJobReport): Promise<string> {
    // The task of a resumed job still runs as the uid the previous process gave it: keep it taken.
    const taskUid = await stat(join(this.execDir, 'task'))
      .then((st) => st.uid)
      .catch(() => null);
    if (taskUid !== null) this.opts.backend.sandbox?.setup.uids?.claim(this.plan.execution_id, taskUid);
    this.jobId = resume.job_id;
    this.report = resume;
    if (resume.binding !== null) {
      this.startedAt = this.opts.clock.now();
      this.resumedStart = true;
    }
    return resume.job_id;
  }

  /** Steps 1 and 2: the job's files, then sbatch; the job id, or the result of a job never submitted. */
  private async setupAndSubmit(): Promise<string | ExecutionResult> {
    // 1. setup
    const problem = await prepareSlurmJob(this.plan, this.opts, this.execDir, this.setupStop.signal);
    // A cancel during setup stopped its fetches (setup then failed for that reason): it ends as asked.
    if (this.cancelRequested)
      return this.neverStarted(this.killReason === 'PREEMPTED' ? 'PREEMPTED' : 'CANCELLED');
    if (typeof problem === 'string') return this.neverStarted('SETUP_FAILED', problem);
    // 2. submit
    let jobId: string;
    try {
      jobId = await this.opts.backend.driver.submit(problem);
    } catch (err) {
      return this.neverStarted('SETUP_FAILED', `sbatch refused the job: ${errorMessage(err)}`);
    }
    this.jobId = jobId;
    this.publish({ job_id: jobId, state: 'PENDING', pending_reason: null, binding: null }, 'accepted');
    if (this.cancelRequested) await this.scancel();
    return jobId;
  }

  /**
   * Step 3: polls until the job is no longer live; returns its last state, null once slurmctld no longer
   * knows it (or after 30 failed polls in a row), or DETACHED when the worker is stopping.
   */
  private async pollUntilEnded(jobId: string): Promise<SlurmJob | null | typeof DETACHED> {
    let pollErrors = 0;
    for (;;) {
      if (this.detached) return DETACHED;
      let job: SlurmJob | null;
      try {
        job = await this.opts.backend.driver.job(jobId);
        pollErrors = 0;
      } catch (err) {
        pollErrors++;
        this.opts.logger?.warn({ job_id: jobId, err: errorMessage(err) }, 'worker: scontrol show job failed');
        if (pollErrors < 30) {
          await this.sleep();
          continue;
        }
        job = null;
      }
      // Detached meanwhile (the worker is stopping): touch nothing more, the next process resumes it.
      if (this.detached) return DETACHED;
      if (job === null) return null;
      await this.observe(jobId, job);
      // COMPLETING is not the end: its final state (CANCELLED, FAILED, …) decides the verdict.
      if (!jobIsLive(job)) return job;
      this.scancelAgainIfStillLive();
      await this.sleep();
    }
  }

  /** One poll's news: the start time of a resumed job, the pending reason or the start, logs, time limit. */
  private async observe(jobId: string, job: SlurmJob): Promise<void> {
    // A resumed job's time limit counts from Slurm's start time, not from this worker's restart.
    if (this.resumedStart && job.startTime !== null) {
      this.startedAt = Math.min(this.startedAt ?? job.startTime, job.startTime);
      this.resumedStart = false;
    }
    if (WAITING_STATES.has(job.state)) {
      const reason = job.reason;
      if (this.report === null || this.report.pending_reason !== reason || this.report.state !== job.state)
        this.publish({ job_id: jobId, state: job.state, pending_reason: reason, binding: null }, 'accepted');
    } else {
      await this.ensureStarted(job);
    }
    await this.logs.pump(false);
    this.checkTimeLimit();
  }

  /** How the job ended: its last polled state, else what sacct knows of it, else lost (with why). */
  private async endState(
    jobId: string,
    job: SlurmJob | null,
  ): Promise<{ ended: EndedJob; lostDetail: string | null }> {
    if (job !== null)
      return { ended: { state: job.state, exitCode: job.exitCode, signal: job.signal }, lostDetail: null };
    const lookup = await this.opts.backend.driver.lookupEnded(jobId).catch((err: unknown) => ({
      kind: 'lost' as const,
      detail: errorMessage(err),
    }));
    if (lookup.kind === 'ended')
      return {
        ended: { state: lookup.job.state, exitCode: lookup.job.exitCode, signal: lookup.job.signal },
        lostDetail: null,
      };
    return { ended: { state: 'UNKNOWN_TO_SLURM', exitCode: null, signal: null }, lostDetail: lookup.detail };
  }

  /** Step 4: drains the logs, collects the outputs and judges the job's end. */
  private async judge(
    jobId: string,
    job: SlurmJob | null,
  ): Promise<{ exited: ExecutionExit; state: EndedJob['state'] }> {
    const { backend } = this.opts;
    const { ended, lostDetail } = await this.endState(jobId, job);
    if (this.startedAt === null) {
      const binding = await this.bindingFromFile();
      if (binding !== null)
        this.markStarted(binding, ended.state === 'UNKNOWN_TO_SLURM' ? 'UNKNOWN' : ended.state);
    }
    await this.logs.pump(true);
    const exitFile = await readExit(this.execDir).catch(() => null);
    // Only a sandboxed task cannot reach the job dir: an unsandboxed one could write these files itself.
    const setupErrors = backend.sandbox === null ? [] : await readSetupErrors(this.execDir);
    // Outputs must belong to the task's user: the owner of its dir (the worker made it and, for a
    // sandboxed task of a root worker, gave it to the task's uid; a task cannot give it away).
    const owner = await stat(join(this.execDir, 'task'))
      .then((st) => st.uid)
      .catch(() => process.getuid?.() ?? null);
    const collection = await collectOutputs(
      { base: this.execDir, below: ['task', 'out'], owner },
      this.plan.spec.outputs,
    );
    const exited = slurmExit({
      ended,
      lostDetail,
      exitFileCode: exitFile === null ? null : exitFile.exit_code,
      killReason: this.killReason,
      collection,
      setupErrors,
      logErrors: this.logs.errors(),
      ...(this.plan.limits === undefined ? {} : { memoryLimitMib: this.plan.limits.memory_mib }),
    });
    return { exited, state: ended.state };
  }

  /** Step 5: waits until Slurm no longer lists the job as live (its GPUs are free); DETACHED if stopping. */
  private async awaitReceipt(jobId: string): Promise<'ended' | typeof DETACHED> {
    for (;;) {
      if (this.detached) return DETACHED;
      const now = await this.opts.backend.driver.job(jobId).catch(() => undefined);
      if (now === null || (now !== undefined && !jobIsLive(now))) return 'ended';
      await this.sleep();
    }
  }

  private async ensureStarted(job: SlurmJob): Promise<void> {
    if (this.startedAt !== null) return;
    // A job that already ended may show its nodes with no GPU indices any more (`GRES=` empty once it is
    // COMPLETING): then the wrapper's binding.json is the record, not an empty list.
    const fromSlurm: SlurmBinding | null =
      job.gpus.length > 0 && job.gpus.every((g) => g.indices.length > 0)
        ? { nodes: job.gpus.map((g) => ({ node: g.node, gpus: [...g.indices] })) }
        : job.nodes.length > 0 && job.state !== 'CONFIGURING'
          ? await this.bindingFromFile()
          : null;
    if (fromSlurm !== null) this.markStarted(fromSlurm, job.state);
  }

  private markStarted(binding: SlurmBinding, state: string): void {
    this.startedAt = this.opts.clock.now();
    this.publish({ job_id: this.jobId as string, state, pending_reason: null, binding }, 'started');
  }

  /** The wrapper's binding.json, reduced to the protocol's shape; null while absent or unreadable. */
  private async bindingFromFile(): Promise<SlurmBinding | null> {
    const b = await readBinding(this.execDir).catch(() => null);
    if (b === null || b.per_node.length === 0) return null;
    return { nodes: b.per_node.slice(0, 64).map((n) => ({ node: n.node, gpus: n.gpus.slice(0, 64) })) };
  }

  private publish(report: SlurmJobReport, phase: 'accepted' | 'started'): void {
    this.report = report;
    this.opts.onJob(report, phase);
  }

  /** The broker's own time limit, counted from the start (Slurm's `--time` is rounded up to minutes). */
  private checkTimeLimit(): void {
    if (this.startedAt === null || this.killReason !== null) return;
    if (this.opts.clock.now() - this.startedAt < this.plan.spec.time_limit_seconds * 1000) return;
    this.killReason = 'TIMED_OUT';
    void this.scancel();
  }

  /** A job asked to end that is still live is scancelled again: a failed or lost scancel must not stand. */
  private scancelAgainIfStillLive(): void {
    if (this.killReason === null) return;
    const now = this.opts.clock.now();
    if (this.lastScancelAt !== null && now - this.lastScancelAt < SCANCEL_RETRY_MS) return;
    void this.scancel();
  }

  private async scancel(): Promise<void> {
    if (this.jobId === null) return;
    this.lastScancelAt = this.opts.clock.now();
    try {
      await this.opts.backend.driver.cancel(this.jobId);
    } catch (err) {
      this.opts.logger?.warn({ job_id: this.jobId, err: errorMessage(err) }, 'worker: scancel failed');
    }
  }

  private sleep(): Promise<void> {
    return new Promise((r) => {
      const timer = setTimeout(() => {
        this.wake = null;
        r();
      }, this.opts.backend.pollMs);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        r();
      };
    });
  }

  private neverStarted(
    reason: 'SETUP_FAILED' | 'CANCELLED' | 'PREEMPTED',
    setupError?: string,
  ): ExecutionResult {
    const exited = exitWithoutTask(reason, setupError);
    this.resolveExited(exited);
    return { ...exited, cleaned: true, cleanup_detail: 'no Slurm job was submitted' };
  }

  private internalFailure(err: unknown): ExecutionResult | Promise<ExecutionResult> {
    // A worker that is stopping closes its store under a run still polling: that is no reason to
    // cancel a job the next worker process will resume.
    if (this.detached) return new Promise<ExecutionResult>(() => undefined);
    if (this.jobId !== null) void this.scancel();
    const exited = exitWithoutTask('SETUP_FAILED', `Slurm executor error: ${errorMessage(err)}`);
    this.resolveExited(exited);
    return {
      ...exited,
      cleaned: false,
      cleanup_detail: 'executor failed; the Slurm job was scancelled, not confirmed',
    };
  }
}
