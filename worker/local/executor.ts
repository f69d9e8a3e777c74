import type { ChildProcess, StdioOptions } from 'node:child_process';
import { spawn } from 'node:child_process';
import { chmod, mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Writable } from 'node:stream';
import type { ExecutionPlan, FailureReason } from '../../src/contracts/worker-protocol.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import type { ExecutionExit, ExecutionHandle, ExecutionResult } from '../executions/executor.js';
import { executionIdProblem, exitWithoutTask } from '../executions/executor.js';
import type { ContainerTasks } from '../sandbox/container.js';
import { NOBODY } from '../sandbox/container.js';
import type { RunAs } from '../sandbox/run-as.js';
import type { SandboxSetup } from '../sandbox/setup.js';
import type { ExecutorProvider } from '../task-io/env.js';
import { buildTaskEnv } from '../task-io/env.js';
import { type InputSource, placeInputs } from '../task-io/inputs.js';
import { makeTaskDirs, taskLayout } from '../task-io/layout.js';
import type { LogChunkHandler, LogPump } from '../task-io/logs.js';
import { startLogPump } from '../task-io/logs.js';
import { type DataMount, resolveMounts } from '../task-io/mounts.js';
import { collectOutputs } from '../task-io/outputs.js';
import type { TaskBox } from './box.js';
import { plainBox } from './box.js';
import { bwrapBoxFor } from './bwrap-box.js';
import { containerBoxFor } from './container-task.js';
import type { OomProbe } from './process-group.js';
import { probeOomKills, readOomKillCount } from './process-group.js';

/**
 * Runs one ExecutionPlan on this host (DESIGN §9).
 *
 * Layout of one execution (the root is the worker's; only `task/` is the task's):
 *
 *   <rootDir>/<execution_id>/            0700, the worker's: the task can neither see nor write it
 *     stdout.log, stderr.log             written by the worker from pipes, never opened by the task
 *     inputs/                            the spec's verified inputs, worker-owned (read-only at /task/…)
 *     task/                              the task's dir (`/task` in a sandbox), owned by the task's uid
 *       out/                             $GPU_BROKER_OUTPUT_DIR
 *       tmp/                             TMPDIR when unsandboxed (a sandbox has a private /tmp)
 *
 * Steps of one execution:
 *   1. setup: the fresh layout above (plus `inputs/`, the spec's inputs, bound read-only over `task/`
 *      in a sandbox; placed straight into `task/`, 0444, when unsandboxed); the env is built from nothing; the box is chosen (box.ts):
 *      bubblewrap with only the leased cards' device nodes, or a plain process group when the worker
 *      runs with `--isolation none`; a `container` task gets the engine's container instead
 *      (container-task.ts), whatever the isolation.
 *   2. spawn the box (no shell) as the leader of a new process group; stdout/stderr are pumped to the
 *      log files and to `onLog`.
 *   3. time limit or cancel: SIGTERM to the task's processes, `kill_grace_seconds`, SIGKILL to the box.
 *   4. main process exits: whatever is left gets SIGTERM, the rest of the grace, SIGKILL (a sandbox
 *      has nothing left: its PID namespace died with the task's first process).
 *   5. outputs are collected (no symlink followed anywhere) and the failure reason decided → `exited`.
 *   6. cleanup receipt: poll until the box has no live process and `checkCardsClean` says clean,
 *      for at most `cleanup_timeout_seconds` (counted from the end of step 4) → `done` settles.
 *
 * The handle's promises never reject: whatever the task does, the result says what happened.
 */

/** Options for one execution; `checkCardsClean` and `cleanupPollMs` are optional. */
export interface ExecutorOptions {
  /** Directory under which each execution gets its own `<execution_id>/` directory. */
  readonly rootDir: string;
  /** This worker's id, passed to the task as GPU_BROKER_WORKER_ID. */
  readonly workerId: string;
  /** The card vendor; `sim` sets GPU_BROKER_SIMULATED=1. */
  readonly provider: ExecutorProvider;
  /** Receives stdout/stderr chunks; see task-io/logs.ts for the offset and encoding rules. */
  readonly onLog: LogChunkHandler;
  /** Says whether the leased cards show no process of this execution any more (part of the receipt). */
  readonly checkCardsClean?: () => Promise<{ clean: boolean; detail?: string }>;
  /** How often the cleanup receipt is polled, in ms (default 200). */
  readonly cleanupPollMs?: number;
  /** Run the task as this unprivileged user (the worker must be root); default: the worker's user. */
  readonly runAs?: RunAs;
  /** How tasks are isolated; default `{kind: 'none'}` (tests of the bare mechanics). */
  readonly sandbox?: SandboxSetup;
  /** How `container` tasks run; absent: this worker has no engine and refuses them (SETUP_FAILED). */
  readonly containers?: ContainerTasks;
  /** Where the spec's inputs come from (cache, then master); a spec with inputs fails setup without it. */
  readonly inputs?: InputSource;
  /** Named data mounts this worker offers (worker/task-io/mounts.ts). */
  readonly mounts?: readonly DataMount[];
  /** Where kill and cleanup deadlines are read from (default the system clock); timers only wake. */
  readonly clock?: Clock;
}

const DEFAULT_CLEANUP_POLL_MS = 200;
/** After the group is dead the pipes close at once; only a process that escaped the group delays them. */
const PIPE_DRAIN_MS = 2000;
/** The time limit is checked against the clock at least this often (ms). */
const LIMIT_CHECK_MS = 1000;

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
  private box: TaskBox | undefined;
  private cancelRequested = false;
  private mainExited = false;
  private killReason: 'TIMED_OUT' | 'CANCELLED' | null = null;
  /** When the group gets SIGKILL in a kill sequence (ms since epoch); null when none is running. */
  private killDeadline: number | null = null;
  private killTimer: NodeJS.Timeout | undefined;
  private limitTimer: NodeJS.Timeout | undefined;
  private readonly clock: Clock;

  constructor(
    private readonly plan: ExecutionPlan,
    private readonly opts: ExecutorOptions,
  ) {
    this.clock = opts.clock ?? systemClock;
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
    const execRoot = resolve(this.opts.rootDir, this.plan.execution_id);
    const taskDir = join(execRoot, 'task');
    const setup = await this.setup(execRoot, taskDir);
    if (typeof setup === 'string') {
      // Nothing ran under the task's uid, so it can go back at once.
      this.releaseUid();
      return this.neverStarted('SETUP_FAILED', setup);
    }
    this.box = setup.box;
    if (this.cancelRequested) {
      this.releaseUid();
      return this.neverStarted('CANCELLED');
    }
    // Read before spawning: the child inherits this cgroup at fork, and a baseline taken after its
    // first allocation could already include its own OOM kill.
    const oomProbe = await probeOomKills('self');
    if (this.cancelRequested) return this.neverStarted('CANCELLED');

    // 2. spawn
    const box = setup.box;
    const { command, args, env, uid, gid, statusPipe, argsData } = box.spawn;
    const stdio: StdioOptions = ['ignore', 'pipe', 'pipe'];
    // fd 3: bwrap's JSON status; fd 4: its options (`--args 4`), so they never show on a command line.
    if (statusPipe || argsData !== undefined) stdio.push(statusPipe ? 'pipe' : 'ignore');
    if (argsData !== undefined) stdio.push('pipe');
    let child: ChildProcess;
    try {
      child = spawn(command, args, {
        cwd: box.kind === 'none' ? taskDir : '/',
        env,
        detached: true,
        stdio,
        ...(uid === undefined || gid === undefined ? {} : { uid, gid }),
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
    if (argsData !== undefined) {
      // bwrap reads its options to the end before anything else; if it dies first, its exit says why.
      const argsPipe = child.stdio[4] as Writable | null | undefined;
      argsPipe?.on('error', () => undefined);
      argsPipe?.end(argsData);
    }
    box.attach(child);
    const pgid = child.pid;
    this.pid = pgid;
    const pumps: LogPump[] = [];
    if (child.stdout)
      pumps.push(startLogPump('stdout', child.stdout, join(execRoot, 'stdout.log'), this.opts.onLog));
    if (child.stderr)
      pumps.push(startLogPump('stderr', child.stderr, join(execRoot, 'stderr.log'), this.opts.onLog));
    this.resolveStarted(pgid);

    // 3. time limit and cancel
    this.watchTimeLimit(this.clock.now() + this.plan.spec.time_limit_seconds * 1000);
    if (this.cancelRequested) this.beginKill('CANCELLED');

    // 4. exit, then leftovers
    const raw = await exit;
    const { code, signal } = box.exitOf(raw.code, raw.signal);
    this.mainExited = true;
    clearTimeout(this.limitTimer);
    clearTimeout(this.killTimer);
    const graceMs =
      this.killDeadline === null
        ? this.plan.kill_grace_seconds * 1000
        : Math.max(0, this.killDeadline - this.clock.now());
    await terminateLeftovers(box, graceMs, this.clock);
    const logErrors = await drainPumps(pumps);

    // 5. outputs and the verdict
    const collection = await collectOutputs(
      { base: execRoot, below: ['task', 'out'], owner: setup.owner },
      this.plan.spec.outputs,
    );
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
    const receipt = await this.awaitCleanup(box);
    await box.dispose();
    // A uid goes back only once nothing of the task is left that could still act under it.
    if (receipt.cleaned) this.releaseUid();
    return { ...exited, ...receipt };
  }

  /** Makes the execution's directories and its box; returns why it could not. */
  private async setup(
    execRoot: string,
    taskDir: string,
  ): Promise<{ box: TaskBox; owner: number | null } | string> {
    const id = this.plan.execution_id;
    const badId = executionIdProblem(id);
    if (badId !== null) return badId;
    const runtime = this.plan.spec.runtime;
    const containers = this.opts.containers;
    if (runtime.kind === 'container' && containers === undefined)
      return `worker ${this.opts.workerId} has no container engine for container tasks (start it with --container-engine auto and install podman)`;
    if ((runtime.argv[0] ?? '') === '') return 'argv[0] is empty';
    const sandbox = this.opts.sandbox ?? { kind: 'none' };
    let identity: { uid: number; gid: number } | null = null;
    try {
      if (runtime.kind === 'container') {
        // Never root inside: a uid of its own on a root worker, else nobody.
        const uid = containers?.uids?.acquire(id) ?? NOBODY;
        identity = { uid, gid: uid };
      } else if (sandbox.kind === 'bwrap' && sandbox.uids !== null) {
        const uid = sandbox.uids.acquire(id);
        identity = { uid, gid: uid };
      } else if (sandbox.kind === 'none' && this.opts.runAs) {
        identity = { uid: this.opts.runAs.uid, gid: this.opts.runAs.gid };
      }
    } catch (err) {
      return describe(err);
    }
    const sandboxed = sandbox.kind === 'bwrap' || runtime.kind === 'container';
    const layout = taskLayout(execRoot, sandboxed);
    try {
      await mkdir(this.opts.rootDir, { recursive: true, mode: 0o700 });
      // Not recursive: an existing directory means this execution already ran here, and a run must
      // start from a fresh directory, never from a previous attempt's files.
      await mkdir(execRoot, { mode: 0o700 });
      const owner =
        identity !== null && (runtime.kind === 'process' || process.getuid?.() === 0) ? identity : null;
      if (owner !== null && !sandboxed) {
        // Unsandboxed, the task's user reaches its dir through the host path: it may pass through the
        // executions dir and the execution root (not list them) and owns only its own dir.
        await chmod(this.opts.rootDir, 0o711);
        await chmod(execRoot, 0o711);
      }
      await makeTaskDirs(layout, owner);
    } catch (err) {
      return `cannot create execution directory ${taskDir}: ${describe(err)}`;
    }
    // 1b. inputs: fetched, verified and placed read-only before anything of the task exists.
    const inputs = this.plan.spec.inputs ?? [];
    // Not yet bound into containers: refuse rather than run a container without the reviewed files.
    if (runtime.kind === 'container' && (inputs.length > 0 || (this.plan.spec.mounts ?? []).length > 0))
      return 'inputs and named mounts are not supported for container tasks yet: put the files in the image, or run a process task';
    const { inputsDir } = layout;
    if (inputs.length > 0) {
      if (this.opts.inputs === undefined) return 'this worker was started without a way to fetch inputs';
      try {
        if (sandboxed) await mkdir(inputsDir, { mode: 0o755 });
      } catch (err) {
        return `cannot create the inputs directory: ${describe(err)}`;
      }
      const problem = await placeInputs(inputs, inputsDir, id, this.opts.inputs);
      if (problem !== null) return problem;
    }
    // 1c. named data mounts: exactly those the spec asks for, and only in a sandbox.
    const mounts = resolveMounts(this.plan.spec.mounts ?? [], this.opts.mounts ?? [], sandboxed);
    if (typeof mounts === 'string') return mounts;
    const owner = identity?.uid ?? process.getuid?.() ?? null;
    if (runtime.kind === 'container' && containers !== undefined && identity !== null) {
      const box = await containerBoxFor({
        plan: this.plan,
        tasks: containers,
        execRoot,
        taskDir,
        workerId: this.opts.workerId,
        provider: this.opts.provider,
        user: identity,
      });
      return typeof box === 'string' ? box : { box, owner };
    }
    if (runtime.kind !== 'process') return `runtime kind ${runtime.kind} is not supported by this worker`;
    const env = buildTaskEnv(this.plan, layout.dirs, this.opts.workerId, this.opts.provider, { sandboxed });
    if (sandbox.kind === 'none') {
      const [command = '', ...args] = this.plan.argv ?? runtime.argv;
      return { box: plainBox({ command, args, env, ...(identity ?? {}) }), owner };
    }
    const box = bwrapBoxFor({
      plan: this.plan,
      sandbox,
      provider: this.opts.provider,
      taskDir,
      inputsDir,
      mounts,
      identity,
      env,
    });
    return typeof box === 'string' ? box : { box, owner };
  }

  private releaseUid(): void {
    const sandbox = this.opts.sandbox;
    if (this.plan.spec.runtime.kind === 'container')
      this.opts.containers?.uids?.release(this.plan.execution_id);
    else if (sandbox?.kind === 'bwrap') sandbox.uids?.release(this.plan.execution_id);
  }

  /**
   * The clock decides when the time limit is reached; the timer only wakes up to look, at least every
   * LIMIT_CHECK_MS, so a clock that jumps (a test's manual clock, a stepped system clock) is noticed.
   */
  private watchTimeLimit(limitAt: number): void {
    const left = limitAt - this.clock.now();
    if (left <= 0) {
      this.beginKill('TIMED_OUT');
      return;
    }
    this.limitTimer = setTimeout(() => this.watchTimeLimit(limitAt), Math.min(left, LIMIT_CHECK_MS));
  }

  private beginKill(reason: 'TIMED_OUT' | 'CANCELLED'): void {
    const box = this.box;
    if (this.killReason !== null || this.mainExited || this.pid === undefined || box === undefined) return;
    this.killReason = reason;
    const graceMs = this.plan.kill_grace_seconds * 1000;
    this.killDeadline = this.clock.now() + graceMs;
    box.terminate();
    this.killTimer = setTimeout(() => box.kill(), graceMs);
  }

  private async awaitCleanup(box: TaskBox): Promise<{ cleaned: boolean; cleanup_detail: string }> {
    const pollMs = this.opts.cleanupPollMs ?? DEFAULT_CLEANUP_POLL_MS;
    const deadline = this.clock.now() + this.plan.cleanup_timeout_seconds * 1000;
    for (;;) {
      const problems: string[] = [];
      const members = await box.live();
      if (members.length > 0) {
        const list = members.map((m) => `${m.pid} (${m.name})`).join(', ');
        problems.push(`the task (${box.kind}) still has live processes: ${list}`);
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
        return { cleaned: true, cleanup_detail: `every process of the task (${box.kind}) is gone ${cards}` };
      }
      if (this.clock.now() >= deadline) {
        return {
          cleaned: false,
          cleanup_detail: `not clean after ${this.plan.cleanup_timeout_seconds}s: ${problems.join('; ')}`,
        };
      }
      await sleep(Math.min(pollMs, Math.max(1, deadline - this.clock.now())));
    }
  }

  private neverStarted(reason: 'SETUP_FAILED' | 'CANCELLED', setupError?: string): ExecutionResult {
    this.resolveStarted(null);
    const exited = exitWithoutTask(reason, setupError);
    this.resolveExited(exited);
    return { ...exited, cleaned: true, cleanup_detail: 'no process was started' };
  }

  /** A bug in the executor must still end in a result, and must not leave the task running. */
  private internalFailure(err: unknown): ExecutionResult {
    clearTimeout(this.limitTimer);
    clearTimeout(this.killTimer);
    this.box?.kill();
    this.resolveStarted(this.pid ?? null);
    const exited = exitWithoutTask('SETUP_FAILED', `executor error: ${describe(err)}`);
    this.resolveExited(exited);
    return { ...exited, cleaned: false, cleanup_detail: 'executor failed; cleanup not confirmed' };
  }
}

/** Step 4: SIGTERM to what the task left in its box, up to `graceMs` for it to go, then SIGKILL. */
async function terminateLeftovers(box: TaskBox, graceMs: number, clock: Clock): Promise<void> {
  if ((await box.live()).length === 0) return;
  box.terminate();
  const deadline = clock.now() + graceMs;
  while (clock.now() < deadline) {
    await sleep(Math.min(50, Math.max(1, deadline - clock.now())));
    if ((await box.live()).length === 0) return;
  }
  box.kill();
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
