import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { chmod, chown, mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { ExecutionPlan, FailureReason } from '../src/contracts/worker-protocol.js';
import type { ExecutorProvider } from './executor-env.js';
import { buildTaskEnv } from './executor-env.js';
import type { LogChunkHandler, LogPump } from './executor-logs.js';
import { startLogPump } from './executor-logs.js';
import type { CollectedOutput } from './executor-outputs.js';
import { collectOutputs } from './executor-outputs.js';
import type { OomProbe } from './executor-process-group.js';
import { liveGroupMembers, probeOomKills, readOomKillCount, signalGroup } from './executor-process-group.js';
import type { RunAs } from './run-as.js';

/**
 * Runs one ExecutionPlan on this host (DESIGN §9).
 *
 * Steps of one execution:
 *   1. setup: a fresh `<rootDir>/<execution_id>/` with `out/` and `tmp/`; the env is built from nothing.
 *   2. spawn argv directly (no shell) as the leader of a new process group; stdout/stderr are pumped
 *      to `stdout.log`/`stderr.log` and to `onLog`.
 *   3. time limit or cancel: SIGTERM to the group, `kill_grace_seconds`, SIGKILL to the group.
 *   4. main process exits: whatever it left in its group gets SIGTERM, the rest of the grace, SIGKILL.
 *   5. outputs are collected and the failure reason decided → `exited` settles.
 *   6. cleanup receipt: poll until the group has no live process and `checkCardsClean` says clean,
 *      for at most `cleanup_timeout_seconds` (counted from the end of step 4) → `done` settles.
 *
 * The handle's promises never reject: whatever the task does, the result says what happened.
 */

export type { ExecutorProvider } from './executor-env.js';
export type { CollectedOutput } from './executor-outputs.js';

/** Options for one execution; `checkCardsClean` and `cleanupPollMs` are optional. */
export interface ExecutorOptions {
  /** Directory under which each execution gets its own `<execution_id>/` directory. */
  readonly rootDir: string;
  /** This worker's id, passed to the task as GPU_BROKER_WORKER_ID. */
  readonly workerId: string;
  /** The card vendor; `sim` sets GPU_BROKER_SIMULATED=1. */
  readonly provider: ExecutorProvider;
  /** Receives stdout/stderr chunks; see executor-logs.ts for the offset and encoding rules. */
  readonly onLog: LogChunkHandler;
  /** Says whether the leased cards show no process of this execution any more (part of the receipt). */
  readonly checkCardsClean?: () => Promise<{ clean: boolean; detail?: string }>;
  /** How often the cleanup receipt is polled, in ms (default 200). */
  readonly cleanupPollMs?: number;
  /** Run the task as this unprivileged user (the worker must be root); default: the worker's user. */
  readonly runAs?: RunAs;
}

/** What is known once the task's main process has exited and its outputs are collected. */
export interface ExecutionExit {
  /** The main process's exit code; null when it was killed by a signal or never started. */
  readonly exit_code: number | null;
  /** The signal that killed the main process, e.g. `SIGKILL`; null otherwise. */
  readonly signal: string | null;
  /** Why the execution failed; null on success. Cleanup is reported separately in `cleaned`. */
  readonly failure_reason: FailureReason | null;
  /** Declared outputs that were found, with their bytes. */
  readonly outputs: CollectedOutput[];
  /** Outputs refused (escapes, not regular files, too large) or required but missing, one line each. */
  readonly output_errors: string[];
  /** Problems writing the log files or delivering chunks; the task itself was not affected. */
  readonly log_errors: string[];
  /** Why the task could not be started, when failure_reason is SETUP_FAILED. */
  readonly setup_error?: string;
}

/** The final result: the exit plus the cleanup receipt. */
export interface ExecutionResult extends ExecutionExit {
  /** True when the group was gone and the cards clean within the cleanup timeout. */
  readonly cleaned: boolean;
  /** What the cleanup check saw, e.g. which processes survived. */
  readonly cleanup_detail: string;
}

/** A running execution. */
export interface ExecutionHandle {
  /** The plan's execution id. */
  readonly executionId: string;
  /** The task's pid (= its process group id) once spawned; undefined before or when it never started. */
  readonly pid: number | undefined;
  /** Settles with the pid once the process runs, or null when it never will (setup failed, cancelled). */
  readonly started: Promise<number | null>;
  /** Settles when the main process has exited, leftovers are killed and outputs are collected. */
  readonly exited: Promise<ExecutionExit>;
  /** Settles with the full result after the cleanup receipt (or its timeout). */
  readonly done: Promise<ExecutionResult>;
  /** Stops the execution (SIGTERM, grace, SIGKILL to the group) with failure CANCELLED; idempotent. */
  cancel(reason: string): void;
}

const DEFAULT_CLEANUP_POLL_MS = 200;
/** After the group is dead the pipes close at once; only a process that escaped the group delays them. */
const PIPE_DRAIN_MS = 2000;
/** Execution ids become a directory name, so they must be one plain path segment. */
const SAFE_SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/;

/** Starts running `plan`; returns at once. See the module comment for the steps. */
export function startExecution(plan: ExecutionPlan, opts: ExecutorOptions): ExecutionHandle {
  const run = new ExecutionRun(plan, opts);
  return {
    executionId: plan.execution_id,
    get pid() {
      return run.pid;
    },
    started: run.started,
    exited: run.exited,
    done: run.done,
    cancel: (reason) => run.cancel(reason),
  };
}

class ExecutionRun {
  pid: number | undefined;
  readonly started: Promise<number | null>;
  readonly exited: Promise<ExecutionExit>;
  readonly done: Promise<ExecutionResult>;

  private resolveStarted!: (pid: number | null) => void;
  private resolveExited!: (exit: ExecutionExit) => void;
  private cancelRequested = false;
  private mainExited = false;
  private killReason: 'TIMED_OUT' | 'CANCELLED' | null = null;
  /** When the group gets SIGKILL in a kill sequence (ms since epoch); null when none is running. */
  private killDeadline: number | null = null;
  private killTimer: NodeJS.Timeout | undefined;
  private limitTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly plan: ExecutionPlan,
    private readonly opts: ExecutorOptions,
  ) {
    this.started = new Promise((r) => {
      this.resolveStarted = r;
    });
    this.exited = new Promise((r) => {
      this.resolveExited = r;
    });
    this.done = this.run().catch((err: unknown) => this.internalFailure(err));
  }

  cancel(_reason: string): void {
    // The reason is the caller's to report; the executor only needs to know that it must stop.
    this.cancelRequested = true;
    this.beginKill('CANCELLED');
  }

  private async run(): Promise<ExecutionResult> {
    // 1. setup
    const execDir = resolve(this.opts.rootDir, this.plan.execution_id);
    const dirs = { execDir, outputDir: join(execDir, 'out'), tmpDir: join(execDir, 'tmp') };
    const setupError = await this.setup(dirs);
    if (setupError !== null) return this.neverStarted('SETUP_FAILED', setupError);
    if (this.cancelRequested) return this.neverStarted('CANCELLED');
    // Read before spawning: the child inherits this cgroup at fork, and a baseline taken after its
    // first allocation could already include its own OOM kill.
    const oomProbe = await probeOomKills('self');
    if (this.cancelRequested) return this.neverStarted('CANCELLED');

    // 2. spawn
    const [command, ...args] = this.plan.spec.runtime.argv;
    let child: ChildProcess;
    try {
      child = spawn(command ?? '', args, {
        cwd: execDir,
        env: buildTaskEnv(this.plan, dirs, this.opts.workerId, this.opts.provider),
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
        ...(this.opts.runAs ? { uid: this.opts.runAs.uid, gid: this.opts.runAs.gid } : {}),
      });
    } catch (err) {
      return this.neverStarted('SETUP_FAILED', `cannot spawn ${JSON.stringify(command)}: ${describe(err)}`);
    }
    const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => {
      child.once('exit', (code, signal) => r({ code, signal }));
    });
    const spawnError = await new Promise<Error | null>((r) => {
      child.once('spawn', () => r(null));
      child.once('error', (err) => r(err));
    });
    if (spawnError !== null || child.pid === undefined) {
      child.stdout?.destroy();
      child.stderr?.destroy();
      const why = spawnError === null ? 'no pid' : describe(spawnError);
      return this.neverStarted('SETUP_FAILED', `cannot spawn ${JSON.stringify(command)}: ${why}`);
    }
    // Later 'error' events (e.g. a failed kill) must not become uncaught exceptions.
    child.on('error', () => undefined);
    const pgid = child.pid;
    this.pid = pgid;
    const pumps: LogPump[] = [];
    if (child.stdout)
      pumps.push(startLogPump('stdout', child.stdout, join(execDir, 'stdout.log'), this.opts.onLog));
    if (child.stderr)
      pumps.push(startLogPump('stderr', child.stderr, join(execDir, 'stderr.log'), this.opts.onLog));
    this.resolveStarted(pgid);

    // 3. time limit and cancel
    this.limitTimer = setTimeout(() => this.beginKill('TIMED_OUT'), this.plan.spec.time_limit_seconds * 1000);
    if (this.cancelRequested) this.beginKill('CANCELLED');

    // 4. exit, then leftovers
    const { code, signal } = await exit;
    this.mainExited = true;
    clearTimeout(this.limitTimer);
    clearTimeout(this.killTimer);
    const graceMs =
      this.killDeadline === null
        ? this.plan.kill_grace_seconds * 1000
        : Math.max(0, this.killDeadline - Date.now());
    await terminateGroup(pgid, graceMs);
    const logErrors = await drainPumps(pumps);

    // 5. outputs and the verdict
    const collection = await collectOutputs(dirs.outputDir, this.plan.spec.outputs);
    const oomKilled = signal === 'SIGKILL' && oomProbe !== null && (await oomCountRose(oomProbe));
    const failure: FailureReason | null =
      this.killReason ??
      (signal !== null
        ? oomKilled
          ? 'OOM_KILLED'
          : 'KILLED_BY_SIGNAL'
        : code !== 0
          ? 'EXIT_NONZERO'
          : collection.requiredMissing
            ? 'OUTPUT_MISSING'
            : null);
    const exited: ExecutionExit = {
      exit_code: code,
      signal,
      failure_reason: failure,
      outputs: collection.outputs,
      output_errors: collection.errors,
      log_errors: logErrors,
    };
    this.resolveExited(exited);

    // 6. cleanup receipt
    const receipt = await this.awaitCleanup(pgid);
    return { ...exited, ...receipt };
  }

  /** Makes the execution's directories; returns why it could not, or null. */
  private async setup(dirs: { execDir: string; outputDir: string; tmpDir: string }): Promise<string | null> {
    const id = this.plan.execution_id;
    if (!SAFE_SEGMENT.test(id) || id.length > 128) {
      return `execution id ${JSON.stringify(id)} is not usable as a directory name`;
    }
    if (this.plan.spec.runtime.kind !== 'process')
      return `runtime kind ${this.plan.spec.runtime.kind} is not supported`;
    if ((this.plan.spec.runtime.argv[0] ?? '') === '') return 'argv[0] is empty';
    try {
      await mkdir(this.opts.rootDir, { recursive: true, mode: 0o700 });
      // Not recursive: an existing directory means this execution already ran here, and a run must
      // start from a fresh directory, never from a previous attempt's files.
      await mkdir(dirs.execDir, { mode: 0o700 });
      await mkdir(dirs.outputDir, { mode: 0o700 });
      await mkdir(dirs.tmpDir, { mode: 0o700 });
      const runAs = this.opts.runAs;
      if (runAs) {
        // The task's user may pass through the executions dir (not list it) and owns only its own dir.
        await chmod(this.opts.rootDir, 0o711);
        for (const dir of [dirs.execDir, dirs.outputDir, dirs.tmpDir]) await chown(dir, runAs.uid, runAs.gid);
      }
      return null;
    } catch (err) {
      return `cannot create execution directory ${dirs.execDir}: ${describe(err)}`;
    }
  }

  private beginKill(reason: 'TIMED_OUT' | 'CANCELLED'): void {
    if (this.killReason !== null || this.mainExited || this.pid === undefined) return;
    const pgid = this.pid;
    this.killReason = reason;
    const graceMs = this.plan.kill_grace_seconds * 1000;
    this.killDeadline = Date.now() + graceMs;
    signalGroup(pgid, 'SIGTERM');
    this.killTimer = setTimeout(() => signalGroup(pgid, 'SIGKILL'), graceMs);
  }

  private async awaitCleanup(pgid: number): Promise<{ cleaned: boolean; cleanup_detail: string }> {
    const pollMs = this.opts.cleanupPollMs ?? DEFAULT_CLEANUP_POLL_MS;
    const deadline = Date.now() + this.plan.cleanup_timeout_seconds * 1000;
    for (;;) {
      const problems: string[] = [];
      const members = await liveGroupMembers(pgid);
      if (members.length > 0) {
        const list = members.map((m) => `${m.pid} (${m.name})`).join(', ');
        problems.push(`process group ${pgid} still has live processes: ${list}`);
      }
      if (this.opts.checkCardsClean) {
        try {
          const cards = await this.opts.checkCardsClean();
          if (!cards.clean) problems.push(`cards not clean: ${cards.detail ?? 'no detail'}`);
        } catch (err) {
          problems.push(`card check failed: ${describe(err)}`);
        }
      }
      if (problems.length === 0) {
        const cards = this.opts.checkCardsClean ? 'and the cards are clean' : '(no card check)';
        return { cleaned: true, cleanup_detail: `process group ${pgid} is gone ${cards}` };
      }
      if (Date.now() >= deadline) {
        return {
          cleaned: false,
          cleanup_detail: `not clean after ${this.plan.cleanup_timeout_seconds}s: ${problems.join('; ')}`,
        };
      }
      await sleep(Math.min(pollMs, Math.max(1, deadline - Date.now())));
    }
  }

  private neverStarted(reason: 'SETUP_FAILED' | 'CANCELLED', setupError?: string): ExecutionResult {
    this.resolveStarted(null);
    const exited: ExecutionExit = {
      exit_code: null,
      signal: null,
      failure_reason: reason,
      outputs: [],
      output_errors: [],
      log_errors: [],
      ...(setupError === undefined ? {} : { setup_error: setupError }),
    };
    this.resolveExited(exited);
    return { ...exited, cleaned: true, cleanup_detail: 'no process was started' };
  }

  /** A bug in the executor must still end in a result, and must not leave the task running. */
  private internalFailure(err: unknown): ExecutionResult {
    clearTimeout(this.limitTimer);
    clearTimeout(this.killTimer);
    if (this.pid !== undefined) signalGroup(this.pid, 'SIGKILL');
    this.resolveStarted(this.pid ?? null);
    const exited: ExecutionExit = {
      exit_code: null,
      signal: null,
      failure_reason: 'SETUP_FAILED',
      outputs: [],
      output_errors: [],
      log_errors: [],
      setup_error: `executor error: ${describe(err)}`,
    };
    this.resolveExited(exited);
    return { ...exited, cleaned: false, cleanup_detail: 'executor failed; cleanup not confirmed' };
  }
}

/** Step 4: SIGTERM to what the task left in its group, up to `graceMs` for it to go, then SIGKILL. */
async function terminateGroup(pgid: number, graceMs: number): Promise<void> {
  if ((await liveGroupMembers(pgid)).length === 0) return;
  signalGroup(pgid, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
    if ((await liveGroupMembers(pgid)).length === 0) return;
  }
  signalGroup(pgid, 'SIGKILL');
}

/** Waits for the log pumps to finish, aborting those a process outside the group still feeds. */
async function drainPumps(pumps: LogPump[]): Promise<string[]> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((r) => {
    timer = setTimeout(() => r('timeout'), PIPE_DRAIN_MS);
  });
  const all = Promise.all(pumps.map((p) => p.finished));
  const first = await Promise.race([all, timeout]);
  clearTimeout(timer);
  const errors: string[] = [];
  if (first === 'timeout') {
    errors.push('a process outside the task group kept the output pipes open; log capture stopped');
    for (const p of pumps) p.abort();
  }
  for (const summary of await all) errors.push(...summary.errors);
  return errors;
}

async function oomCountRose(probe: OomProbe): Promise<boolean> {
  const now = await readOomKillCount(probe.file);
  return now !== null && now > probe.baseline;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
