import { constants } from 'node:os';
import type { TaskView } from '../../contracts/views.js';
import type { MasterClient } from '../common/master-client.js';
import { escapeField } from '../common/output.js';

/**
 * Following a task from the CLI (ADR 0026), shared by `gpu-broker run` and `gpu-broker task …`:
 * the exit code a finished task maps to, reading its logs by byte offset (each byte printed once, none
 * skipped), and the follow loop that long-polls `wait_for_task` in calls well under a client's timeout.
 */

/**
 * The exit codes of `gpu-broker run` and `task wait` that are not the task's own (docs/clients.md,
 * docs/decisions/0026-run-cli.md): high enough that a script's usual small codes stay readable, and in
 * the range timeout(1) uses for the same meanings (124: time limit).
 */
export const RUN_EXIT = {
  /** The spec has error findings: nothing was sent to review, nothing ran. */
  FINDINGS: 120,
  /** A reviewer asked for changes: edit and run again (the same proposal is revised). */
  CHANGES_REQUESTED: 121,
  /** Rejected, withdrawn or expired: nothing ran. */
  REJECTED: 122,
  /** The task was cancelled. */
  CANCELLED: 123,
  /** The task reached its time limit. */
  TIMED_OUT: 124,
  /** The task failed without an exit code of its own (setup, missing output, lost worker, …). */
  FAILED_NO_EXIT: 125,
  /** Ctrl-C: the CLI stopped following; the task keeps running. */
  INTERRUPTED: 130,
} as const;

/** Task states after which nothing changes any more (RECONCILIATION_REQUIRED waits for an operator). */
export const TERMINAL_TASK_STATES: ReadonlySet<string> = new Set([
  'COMPLETED',
  'FAILED',
  'CANCELLED',
  'RECONCILIATION_REQUIRED',
]);

/**
 * Whether following stops at this view: a final state, except a task parked only because its worker
 * fell silent (`reason.code: worker_unreachable`), which comes back by itself if the worker does; the
 * master's wait keeps waiting there too (docs/operations.md "Partitions").
 */
export function followEnds(t: TaskView): boolean {
  if (t.state === 'RECONCILIATION_REQUIRED' && t.reason?.['code'] === 'worker_unreachable') return false;
  return TERMINAL_TASK_STATES.has(t.state);
}

/** 128 + the signal's number, as a shell reports a process a signal ended; undefined when unknown. */
export function signalExitCode(signal: string | null): number | undefined {
  if (!signal) return undefined;
  const n = /^\d+$/.test(signal) ? Number(signal) : constants.signals[signal as NodeJS.Signals];
  return n === undefined ? undefined : 128 + n;
}

/** Exit code per failure reason, when the reason decides it alone (the rest look at exit_code/signal). */
const FAILURE_EXIT: Readonly<Record<string, number>> = {
  TIMED_OUT: RUN_EXIT.TIMED_OUT,
  CANCELLED: RUN_EXIT.CANCELLED,
  OUTPUT_MISSING: RUN_EXIT.FAILED_NO_EXIT,
  SETUP_FAILED: RUN_EXIT.FAILED_NO_EXIT,
  WORKER_LOST: RUN_EXIT.FAILED_NO_EXIT,
  CLEANUP_UNCONFIRMED: RUN_EXIT.FAILED_NO_EXIT,
  STALE_EPOCH: RUN_EXIT.FAILED_NO_EXIT,
};

/** The exit code a finished task maps to (see RUN_EXIT); a task still going maps to FAILED_NO_EXIT. */
export function taskExitCode(t: Pick<TaskView, 'state' | 'failure_reason' | 'exit_code' | 'signal'>): number {
  if (t.state === 'COMPLETED') return t.exit_code ?? 0;
  if (t.state === 'CANCELLED') return RUN_EXIT.CANCELLED;
  if (t.state !== 'FAILED') return RUN_EXIT.FAILED_NO_EXIT;
  const byReason = t.failure_reason ? FAILURE_EXIT[t.failure_reason] : undefined;
  if (byReason !== undefined) return byReason;
  const bySignal = signalExitCode(t.signal);
  if (bySignal !== undefined) return bySignal;
  return t.exit_code !== null && t.exit_code !== 0 ? t.exit_code & 0xff || 1 : RUN_EXIT.FAILED_NO_EXIT;
}

/** One line saying how a finished task ended, for a person. */
export function endLine(t: TaskView): string {
  const how =
    t.state === 'COMPLETED'
      ? `exit ${t.exit_code ?? 0}`
      : [t.failure_reason, t.exit_code !== null ? `exit ${t.exit_code}` : null, t.signal]
          .filter((x) => x)
          .join(', ');
  // The program's own non-zero exit needs no worker detail (it lists the limits of every execution).
  const detail =
    t.failure_detail && t.failure_reason !== 'EXIT_NONZERO' ? ` — ${escapeField(t.failure_detail)}` : '';
  return `task ${t.task_id} ${t.state}${how ? ` (${how})` : ''}${detail}`;
}

/** One line saying where a task stands while it is not finished (why it waits, where it runs). */
export function stateLine(t: TaskView): string {
  if (t.state === 'QUEUED') {
    const why = typeof t.reason?.['code'] === 'string' ? (t.reason['code'] as string) : 'waiting';
    return `task ${t.task_id} QUEUED (${escapeField(why)}${t.position !== null ? `, position ${t.position}` : ''})`;
  }
  const cards = t.cards.map((c) => c.index).join(',');
  const where = t.worker_id ? ` on ${escapeField(t.worker_id)}${cards ? ` cards ${cards}` : ''}` : '';
  // What happened to its worker (unreachable, or back after an outage), in the master's words.
  const code = t.reason?.['code'];
  const message = t.reason?.['message'];
  const outage =
    (code === 'worker_unreachable' || code === 'worker_returned') && typeof message === 'string'
      ? ` (${escapeField(message)})`
      : '';
  return `task ${t.task_id} ${t.state}${where}${t.simulated ? ' (simulated cards)' : ''}${outage}`;
}

/** The log streams. */
export type LogStream = 'stdout' | 'stderr';

interface LogPage {
  next_offset: number;
  total_bytes: number;
  data: string;
}

/** Most bytes one log page asks for. */
const LOG_PAGE_BYTES = 1024 * 1024;

/**
 * Reads a task's logs from byte offsets it keeps per stream, so each byte is printed exactly once
 * however often `pump` runs (the master's log is append-only and addressed by byte).
 */
export class LogReader {
  readonly offsets: Record<LogStream, number> = { stdout: 0, stderr: 0 };
  constructor(
    private readonly c: MasterClient,
    private readonly taskId: string,
    private readonly write: Record<LogStream, (text: string) => void>,
    readonly streams: readonly LogStream[] = ['stdout', 'stderr'],
  ) {}

  /** Prints what arrived since the last call; returns how many bytes that was. */
  async pump(): Promise<number> {
    let read = 0;
    for (const stream of this.streams) {
      for (;;) {
        const p = await this.c.get<LogPage>(
          `/api/v1/tasks/${encodeURIComponent(this.taskId)}/logs?stream=${stream}&offset=${this.offsets[stream]}&max_bytes=${LOG_PAGE_BYTES}`,
        );
        if (p.data) this.write[stream](p.data);
        const advanced = p.next_offset - this.offsets[stream];
        if (advanced <= 0) break;
        read += advanced;
        this.offsets[stream] = p.next_offset;
        if (p.next_offset >= p.total_bytes) break;
      }
    }
    return read;
  }

  /**
   * After the task ended: reads until a pump half a second after the last finds nothing new. A large log
   * can still be arriving after the exit report (docs/decisions/0022-log-backpressure.md).
   */
  async drain(): Promise<void> {
    while ((await this.pump()) > 0) await new Promise((r) => setTimeout(r, 500));
  }
}

/** What a follow ended with: the finished task, or 'interrupted' when the stop signal came first. */
export type FollowEnd = { task: TaskView } | 'interrupted';

/** Options of {@link followTask}. */
export interface FollowOptions {
  /** Logs to print while it runs (omit to print none). */
  logs?: LogReader;
  /** Resolves on Ctrl-C. */
  stop?: Promise<void> | undefined;
  /** Called with each new state line (QUEUED with its reason, RUNNING on which cards). */
  onState?: (line: string, t: TaskView) => void;
}

/**
 * Seconds one wait_for_task call may block: 1 while logs stream (it returns at once when the task ends),
 * 5 while the task is still QUEUED (no logs yet; a start is noticed within 5 s, and a long wait in the
 * queue costs one call per 5 s, not three per second), 20 with no logs to read (each call < 25 s).
 */
const WAIT_WITH_LOGS_S = 1;
const WAIT_QUEUED_S = 5;
const WAIT_QUIET_S = 20;

/**
 * Follows a task until it ends: prints its state changes, streams its logs (when given), and returns the
 * final view once every log byte was read. Each master call blocks for at most 20 s.
 */
export async function followTask(c: MasterClient, taskId: string, opts: FollowOptions): Promise<FollowEnd> {
  const stopped = opts.stop?.then(() => 'interrupted' as const);
  let lastLine = '';
  let queued = false;
  const path = `/api/v1/tasks/${encodeURIComponent(taskId)}/wait?timeout_seconds=`;
  for (;;) {
    const step = (async (): Promise<TaskView> => {
      if (opts.logs && !queued) await opts.logs.pump();
      const wait: number = !opts.logs ? WAIT_QUIET_S : queued ? WAIT_QUEUED_S : WAIT_WITH_LOGS_S;
      return (await c.get<{ task: TaskView }>(`${path}${wait}`)).task;
    })();
    step.catch(() => undefined);
    const t = stopped ? await Promise.race([step, stopped]) : await step;
    if (t === 'interrupted') return t;
    const line = stateLine(t);
    if (line !== lastLine && !followEnds(t)) opts.onState?.(line, t);
    lastLine = line;
    queued = t.state === 'QUEUED';
    if (followEnds(t)) {
      await opts.logs?.drain();
      return { task: t };
    }
  }
}
