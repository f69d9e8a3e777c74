import { open } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
import type { FailureReason } from '../../src/contracts/worker-protocol.js';
import {
  DEFAULT_MAX_LOG_BYTES_PER_TASK,
  logTruncatedMarker,
  MAX_LOG_CHUNK_BYTES,
} from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { ExecutionExit } from '../executions/executor.js';
import { LogBudget } from '../task-io/log-budget.js';
import { incompleteTailLength, type LogChunkHandler, type LogStreamName } from '../task-io/logs.js';
import type { OutputCollection } from '../task-io/outputs.js';
import type { JobFiles } from './cli/job-wrapper.js';
import type { SlurmJobState } from './cli/types.js';

/**
 * What a Slurm execution (executor.ts) reads back from its job: the logs, tailed from the job's
 * output files by offset, and the verdict, from Slurm's final state and the wrapper's exit code.
 */

/** What decides a Slurm execution's failure reason. */
export interface SlurmOutcome {
  /** Set when the broker itself scancelled the job (cancel, or its own time limit). */
  killReason: 'TIMED_OUT' | 'CANCELLED' | 'PREEMPTED' | null;
  /** Slurm's final state; UNKNOWN_TO_SLURM when slurmctld, jobcomp and sacct no longer know it. */
  state: SlurmJobState | 'UNKNOWN_TO_SLURM';
  exitCode: number | null;
  signal: string | null;
  /** The job vanished: no record of its end anywhere. */
  lost: boolean;
  requiredMissing: boolean;
  /** Why ranks could not build their sandbox (setup-error.<rank>); read only for sandboxed jobs. */
  setupErrors?: readonly string[];
  /** The task's memory limit, requested with the job (`--mem`); absent: none was requested. */
  memoryLimitMib?: number;
}

/** The failure reason (null on success) and a detail line for the agent. Pure. */
export function slurmVerdict(o: SlurmOutcome): { failure: FailureReason | null; detail: string | null } {
  if (o.killReason !== null) return { failure: o.killReason, detail: null };
  // A rank that could not build its sandbox never ran the task (and the others were killed with it).
  if ((o.setupErrors ?? []).length > 0)
    return { failure: 'SETUP_FAILED', detail: `sandbox: ${(o.setupErrors ?? []).join('; ')}` };
  if (o.lost) return { failure: 'WORKER_LOST', detail: 'the Slurm job vanished' };
  switch (o.state) {
    case 'TIMEOUT':
      return { failure: 'TIMED_OUT', detail: 'Slurm ended the job at its --time limit' };
    case 'CANCELLED':
      return { failure: 'KILLED_BY_SIGNAL', detail: 'the Slurm job was cancelled outside the broker' };
    case 'OUT_OF_MEMORY':
      // With the task's limit requested as the job's --mem, Slurm's cgroup enforced that limit.
      return o.memoryLimitMib === undefined
        ? { failure: 'OOM_KILLED', detail: 'Slurm reports OUT_OF_MEMORY' }
        : {
            failure: 'OUT_OF_MEMORY',
            detail: `Slurm reports OUT_OF_MEMORY: the task went over its memory limit of ${o.memoryLimitMib} MiB (requested with the job as --mem)`,
          };
    case 'NODE_FAIL':
    case 'BOOT_FAIL':
      return { failure: 'WORKER_LOST', detail: `Slurm reports ${o.state}` };
    case 'PREEMPTED':
    case 'DEADLINE':
    case 'REVOKED':
      return { failure: 'KILLED_BY_SIGNAL', detail: `Slurm reports ${o.state}` };
    default:
      break;
  }
  if (o.signal !== null) return { failure: 'KILLED_BY_SIGNAL', detail: null };
  if (o.exitCode === null)
    return { failure: 'WORKER_LOST', detail: `no exit code from Slurm (state ${o.state})` };
  if (o.exitCode !== 0) return { failure: 'EXIT_NONZERO', detail: null };
  return { failure: o.requiredMissing ? 'OUTPUT_MISSING' : null, detail: null };
}

/** How a job ended, as far as Slurm can say. */
export interface EndedJob {
  readonly state: SlurmJobState | 'UNKNOWN_TO_SLURM';
  readonly exitCode: number | null;
  readonly signal: number | null;
}

/** What an ended job left behind, read by the executor. */
export interface SlurmEnd {
  readonly ended: EndedJob;
  /** Why no record of the job's end was found anywhere; null when one was. */
  readonly lostDetail: string | null;
  /** The task's exit code from the wrapper's exit.json; null when there is none. */
  readonly exitFileCode: number | null;
  readonly killReason: SlurmOutcome['killReason'];
  readonly collection: OutputCollection;
  readonly setupErrors: readonly string[];
  readonly logErrors: ExecutionExit['log_errors'];
  readonly memoryLimitMib?: number;
}

/** The execution's exit from what its job left behind. Pure. */
export function slurmExit(e: SlurmEnd): ExecutionExit {
  const { ended, lostDetail } = e;
  // Slurm's ExitCode is the batch script's: only a job that ended by itself (COMPLETED, FAILED) has
  // the task's. A cancelled or timed-out job's "0:15" must not read as a clean exit 0.
  const byItself = ended.state === 'COMPLETED' || ended.state === 'FAILED';
  // A job the broker itself ended (its scancel: a cancel, a preemption, the time limit) that Slurm did
  // not see end by itself was cut: whatever status the step left in exit.json (srun can return 0 for a
  // step it tore down) is not the task finishing, so it carries no exit code and the kill reason stands.
  // (Seen on Slurm 22.05: a cancel 60 ms after the task step started ended COMPLETED, exit 0.)
  const cut = e.killReason !== null && !byItself;
  const exitCode = cut ? null : (e.exitFileCode ?? (byItself ? ended.exitCode : null));
  const signal = ended.signal !== null && ended.signal !== 0 ? signalName(ended.signal) : null;
  const verdict = slurmVerdict({
    killReason: e.killReason,
    state: ended.state,
    exitCode,
    signal,
    lost: lostDetail !== null,
    requiredMissing: e.collection.requiredMissing,
    setupErrors: e.setupErrors,
    ...(e.memoryLimitMib === undefined ? {} : { memoryLimitMib: e.memoryLimitMib }),
  });
  return {
    exit_code: cut || (e.exitFileCode === null && signal !== null) ? null : exitCode,
    // (exit.json exists only when the task's srun step returned, so then its code is the task's.)
    signal,
    failure_reason: verdict.failure,
    outputs: e.collection.outputs,
    output_errors: e.collection.errors,
    log_errors: e.logErrors,
    ...(verdict.detail === null && lostDetail === null
      ? {}
      : { setup_error: [verdict.detail, lostDetail].filter((x) => x !== null).join('; ') }),
  };
}

/** A signal's name from its number (`15` → `SIGTERM`). */
export function signalName(n: number): string {
  for (const [name, value] of Object.entries(osConstants.signals)) if (value === n) return name;
  return `SIG${n}`;
}

/**
 * Tails a job's stdout.log and stderr.log: each call delivers what was appended since the last, in
 * chunks of at most MAX_LOG_CHUNK_BYTES at their byte offsets, holding back a UTF-8 character whose
 * bytes have not all been written yet (except on the final call). A restarted worker starts again from
 * 0: the master trims overlapping chunks.
 *
 * Both streams share the task's log cap (task-io/log-budget.ts, as a local task's pumps): past it each
 * stream gets one marker line and its file is read no further, so the outbox and the master hold at
 * most the cap however much the job writes. (The job's own files on the shared file system are capped
 * by the job itself, per stream, at the same cap: job-wrapper.ts.)
 */
export class JobLogTail {
  /** Bytes of each file read (and delivered or dropped). */
  private readonly offsets: Record<LogStreamName, number> = { stdout: 0, stderr: 0 };
  /** Bytes of each stream delivered: the kept bytes and the marker, the offsets the master sees. */
  private readonly delivered: Record<LogStreamName, number> = { stdout: 0, stderr: 0 };
  private readonly cut = new Set<LogStreamName>();
  private readonly problems: string[] = [];

  constructor(
    private readonly files: Pick<JobFiles, 'stdout' | 'stderr'>,
    private readonly onLog: LogChunkHandler,
    private readonly budget: LogBudget = new LogBudget(DEFAULT_MAX_LOG_BYTES_PER_TASK),
  ) {}

  /** Problems reading the files (at most 8); a missing file is not one (the job has not written yet). */
  errors(): string[] {
    return [...this.problems];
  }

  /** Delivers what both files gained; `final` also delivers a trailing partial character. */
  async pump(final: boolean): Promise<void> {
    for (const [stream, path] of [
      ['stdout', this.files.stdout],
      ['stderr', this.files.stderr],
    ] as const) {
      try {
        await this.pumpFile(stream, path, final);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT' && this.problems.length < 8)
          this.problems.push(`${stream}.log: ${errorMessage(err)}`);
      }
    }
  }

  private async pumpFile(stream: LogStreamName, path: string, final: boolean): Promise<void> {
    if (this.cut.has(stream)) return;
    const handle = await open(path, 'r');
    try {
      for (;;) {
        const buf = Buffer.alloc(MAX_LOG_CHUNK_BYTES);
        const { bytesRead } = await handle.read(buf, 0, buf.length, this.offsets[stream]);
        if (bytesRead === 0) return;
        let data = buf.subarray(0, bytesRead);
        const keep = final ? 0 : incompleteTailLength(data);
        if (keep === data.length) return;
        data = data.subarray(0, data.length - keep);
        this.offsets[stream] += data.length;
        const take = this.budget.take(stream, data.length);
        if (take.keep > 0) this.deliver(stream, data.subarray(0, take.keep));
        if (take.marker) {
          this.deliver(stream, Buffer.from(logTruncatedMarker(this.budget.cap)));
          this.cut.add(stream);
          return;
        }
        if (bytesRead < buf.length) return;
      }
    } finally {
      await handle.close();
    }
  }

  private deliver(stream: LogStreamName, data: Buffer): void {
    const offset = this.delivered[stream];
    this.delivered[stream] += data.length;
    this.onLog(stream, offset, data.toString('utf8'));
  }
}
