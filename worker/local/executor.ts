import { rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { DEFAULT_MAX_LOG_BYTES_PER_TASK, type ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import { errorMessage } from '../../src/platform/error-message.js';
import type { ExecutionExit, ExecutionHandle, ExecutionResult } from '../executions/executor.js';
import { exitWithoutTask } from '../executions/executor.js';
import { LogBudget } from '../task-io/log-budget.js';
import type { LogChunkHandler, LogPump } from '../task-io/logs.js';
import { startLogPump } from '../task-io/logs.js';
import type { TaskBox } from './box.js';
import { PAST_DEADLINE, untilDeadline } from './deadline.js';
import { judgeExit } from './judge.js';
import type { Launcher } from './launch.js';
import type { OomProbe } from './process-group.js';
import { probeOomKills, signalGroup } from './process-group.js';
import { type LocalSetup, type LocalSetupOptions, releaseTaskUid, setupExecution } from './setup.js';
import { sharedSpawner } from './spawner.js';
import { awaitCleanup, drainPumps, terminateLeftovers } from './teardown.js';

/**
 * Runs one ExecutionPlan on this host (docs/worker-protocol.md, docs/security.md).
 *
 * Layout of one execution (the root is the worker's; only `task/` is the task's):
 *
 *   <rootDir>/<execution_id>/            0700, the worker's: the task can neither see nor write it
 *     stdout.log, stderr.log             written by the worker from pipes, never opened by the task;
 *                                        made on the stream's first byte (none for a quiet stream)
 *     inputs/                            the spec's verified inputs, worker-owned (read-only at /task/…)
 *     task/                              the task's dir (`/task` in a sandbox), owned by the task's uid
 *       out/                             $GPU_BROKER_OUTPUT_DIR
 *       tmp/                             TMPDIR when unsandboxed (a sandbox has a private /tmp)
 *
 * Steps of one execution:
 *   1. setup (setup.ts): the fresh layout above (plus `inputs/`, the spec's inputs, bound read-only over
 *      `task/` in a sandbox; placed straight into `task/`, 0444, when unsandboxed); the env is built from
 *      nothing; the box is chosen (box.ts): bubblewrap with only the leased cards' device nodes, or a
 *      plain process group when the worker runs with `--isolation none`; a `container` task gets the
 *      engine's container instead (container-task.ts), whatever the isolation.
 *   2. spawn the box (no shell) as the leader of a new process group, through the worker's spawner
 *      (spawner.ts, ADR 0032: the fork happens off this event loop); a bwrap box with limits
 *      (sandbox/limits.ts) enters the task's cgroup before it reads its options, so before any code of
 *      the task runs, and its task dir is watched; stdout/stderr are pumped to the log files and to `onLog`.
 *   3. time limit or cancel: SIGTERM to the task's processes, `kill_grace_seconds`, SIGKILL to the box.
 *   4. main process exits: whatever is left gets SIGTERM, the rest of the grace, SIGKILL (a sandbox
 *      has nothing left: its PID namespace died with the task's first process) (teardown.ts).
 *   5. outputs are collected (no symlink followed anywhere) and the failure reason decided (judge.ts,
 *      verdict.ts) → `exited`.
 *   6. cleanup receipt: poll until the box has no live process and `checkCardsClean` says clean,
 *      for at most `cleanup_timeout_seconds` (counted from the end of step 4) → `done` settles
 *      (teardown.ts); the box is disposed (a bwrap box with limits: its cgroup emptied and removed, the
 *      task dir, its scratch, removed).
 *
 * The handle's promises never reject: whatever the task does, the result says what happened.
 */

/** Options for one execution; `checkCardsClean` and `cleanupPollMs` are optional. */
export interface ExecutorOptions extends LocalSetupOptions {
  /** Receives stdout/stderr chunks; see task-io/logs.ts for the offset and encoding rules. */
  readonly onLog: LogChunkHandler;
  /** Says whether the leased cards show no process of this execution any more (part of the receipt). */
  readonly checkCardsClean?: () => Promise<{ clean: boolean; detail?: string }>;
  /** Log bytes (both streams together) kept per task; default DEFAULT_MAX_LOG_BYTES_PER_TASK (64 MiB). */
  readonly maxLogBytes?: number;
  /** How often the cleanup receipt is polled, in ms (default 200). */
  readonly cleanupPollMs?: number;
  /** Where kill and cleanup deadlines are read from (default the system clock); timers only wake. */
  readonly clock?: Clock;
  /**
   * How the box's process is started (launch.ts): default this process's spawner (spawner.ts, ADR 0032),
   * so no fork of the worker blocks its event loop; `inlineLauncher` forks the worker itself.
   */
  readonly launcher?: Launcher;
}

const DEFAULT_CLEANUP_POLL_MS = 200;
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
    cancel: (reason, opts) => run.cancel(reason, opts),
  };
}

/** The task's main process once spawned: its exit, and the pumps of its stdout and stderr. */
interface Spawned {
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly pumps: LogPump[];
}

class ExecutionRun {
  pid: number | undefined;
  readonly started: Promise<number | null>;
  readonly exited: Promise<ExecutionExit>;
  readonly done: Promise<ExecutionResult>;

  private resolveStarted!: (pid: number | null) => void;
  private resolveExited!: (exit: ExecutionExit) => void;
  private box: TaskBox | undefined;
  /** Stops setup's input fetches part-way: a cancel, or a backfilled run's deadline, during setup. */
  private readonly setupStop = new AbortController();
  private cancelRequested = false;
  private mainExited = false;
  private killReason: 'TIMED_OUT' | 'CANCELLED' | 'PREEMPTED' | null = null;
  /** The stop asked for is a preemption (the scheduler reclaims the cards): PREEMPTED, the spec's grace. */
  private preemptRequested = false;
  /** Set when the task's exit status was lost with its spawner (it was killed): it ends WORKER_LOST. */
  private lostReason: string | null = null;
  /** When the group gets SIGKILL in a kill sequence (ms since epoch); null when none is running. */
  private killDeadline: number | null = null;
  private killTimer: NodeJS.Timeout | undefined;
  private limitTimer: NodeJS.Timeout | undefined;
  private readonly clock: Clock;
  /**
   * A backfilled run's deadline (plan `stop_within_seconds`, ADR 0049), counted from when this run
   * began, its setup included; +Infinity: none.
   */
  private readonly stopAt: number;
  /** The deadline comes before the time limit from the start: a TIMED_OUT then says which stopped it. */
  private deadlineFirst = false;

  constructor(
    private readonly plan: ExecutionPlan,
    private readonly opts: ExecutorOptions,
  ) {
    this.clock = opts.clock ?? systemClock;
    const within = plan.stop_within_seconds;
    this.stopAt = within === undefined ? Number.POSITIVE_INFINITY : this.clock.now() + within * 1000;
    this.started = new Promise((r) => {
      this.resolveStarted = r;
    });
    this.exited = new Promise((r) => {
      this.resolveExited = r;
    });
    this.done = this.run()
      .catch((err: unknown) => this.internalFailure(err))
      .finally(() => removeEnvFiles(resolve(this.opts.rootDir, this.plan.execution_id)));
  }

  cancel(_reason: string, opts?: { readonly preempt?: boolean }): void {
    // The reason is the caller's to report; the executor only needs to know that it must stop, and
    // whether the stop is a preemption (a cancel asked for first stays a cancel).
    if (!this.cancelRequested && opts?.preempt === true) this.preemptRequested = true;
    this.cancelRequested = true;
    this.setupStop.abort();
    this.beginKill(this.stopReason());
  }

  /** The failure a requested stop ends in. */
  private stopReason(): 'CANCELLED' | 'PREEMPTED' {
    return this.preemptRequested ? 'PREEMPTED' : 'CANCELLED';
  }

  private async run(): Promise<ExecutionResult> {
    // 1. setup
    const execRoot = resolve(this.opts.rootDir, this.plan.execution_id);
    const ready = await this.setup(execRoot);
    if (!('setup' in ready)) return ready;
    const { setup, oomProbe } = ready;
    const box = setup.box;

    // 2. spawn
    const spawned = await this.spawnTask(box, execRoot);
    if (typeof spawned === 'string') {
      await box.dispose();
      return this.neverStarted('SETUP_FAILED', spawned);
    }
    // The disk watch ends a running task; once it has exited, its leftovers are step 4's to stop.
    box.limits?.watch(() => {
      if (!this.mainExited) box.kill();
    });

    // 3. time limit (a backfilled run's deadline if that comes first) and cancel
    const limitAt = this.clock.now() + this.plan.spec.time_limit_seconds * 1000;
    this.deadlineFirst = this.stopAt < limitAt;
    this.watchTimeLimit(Math.min(limitAt, this.stopAt));
    if (this.cancelRequested) this.beginKill(this.stopReason());

    // 4. exit, then leftovers
    const main = await this.awaitExit(spawned, box);

    // 5. outputs and the verdict
    const exited = await judgeExit(this.plan, main, box, {
      execRoot,
      owner: setup.owner,
      oomProbe,
      killReason: this.lostReason === null ? this.killReason : 'WORKER_LOST',
      lostReason: this.lostReason,
      deadlineFirst: this.deadlineFirst,
    });
    this.resolveExited(exited);

    // 6. cleanup receipt
    const receipt = await awaitCleanup(box, {
      checkCardsClean: this.opts.checkCardsClean,
      pollMs: this.opts.cleanupPollMs ?? DEFAULT_CLEANUP_POLL_MS,
      timeoutSeconds: this.plan.cleanup_timeout_seconds,
      clock: this.clock,
    });
    await box.dispose();
    // A uid goes back only once nothing of the task is left that could still act under it.
    if (receipt.cleaned) releaseTaskUid(this.plan, this.opts);
    return { ...exited, ...receipt };
  }

  /**
   * Step 1: the execution's layout and box (setup.ts), and the OOM baseline; the result of a run that
   * never started when setup failed or a cancel came first.
   */
  private async setup(
    execRoot: string,
  ): Promise<{ readonly setup: LocalSetup; readonly oomProbe: OomProbe | null } | ExecutionResult> {
    const pending = setupExecution(this.plan, this.opts, execRoot, this.setupStop.signal);
    const setup = await untilDeadline(pending, this.stopAt, this.clock, LIMIT_CHECK_MS);
    if (setup === PAST_DEADLINE) {
      // A backfilled run's setup (an input fetch) still going at its deadline: its cards go back now (no
      // process of the task exists, and setup holds no card). Its fetch is stopped part-way; what setup
      // made is undone once setup has ended.
      this.setupStop.abort();
      void pending.then(
        async (late) => {
          if (typeof late !== 'string') await late.box.dispose().catch(() => undefined);
          await removeEnvFiles(execRoot);
          releaseTaskUid(this.plan, this.opts);
        },
        () => releaseTaskUid(this.plan, this.opts),
      );
      return this.neverStarted(
        'TIMED_OUT',
        `backfilled: its setup was still going at its deadline of ${this.plan.stop_within_seconds} s (its time limit plus the start-up allowance; docs/operations.md "Backfill")`,
      );
    }
    // A cancel during setup stopped its fetches (setup then failed for that reason): it ends as asked.
    if (this.cancelRequested) {
      if (typeof setup !== 'string') await setup.box.dispose();
      releaseTaskUid(this.plan, this.opts);
      return this.neverStarted(this.stopReason());
    }
    if (typeof setup === 'string') {
      // Nothing ran under the task's uid, so it can go back at once.
      releaseTaskUid(this.plan, this.opts);
      return this.neverStarted('SETUP_FAILED', setup);
    }
    this.box = setup.box;
    // A backfilled run whose setup (inputs, image) outlasted its deadline never starts.
    if (this.clock.now() >= this.stopAt) {
      await setup.box.dispose();
      releaseTaskUid(this.plan, this.opts);
      return this.neverStarted(
        'TIMED_OUT',
        `backfilled: its setup took past its deadline of ${this.plan.stop_within_seconds} s (its time limit plus the start-up allowance; docs/operations.md "Backfill")`,
      );
    }
    // Read before spawning: the child inherits this cgroup at fork, and a baseline taken after its
    // first allocation could already include its own OOM kill.
    const oomProbe = await probeOomKills('self');
    if (this.cancelRequested) {
      // Nothing ran under the task's uid either: it goes back, as for a cancel before the probe.
      await setup.box.dispose();
      releaseTaskUid(this.plan, this.opts);
      return this.neverStarted(this.stopReason());
    }
    return { setup, oomProbe };
  }

  /**
   * Step 4: the main process's exit (as the box reports it), then whatever is left of the task is
   * stopped within the rest of the grace, and the log pumps are drained.
   */
  private async awaitExit(
    spawned: Spawned,
    box: TaskBox,
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null; logErrors: string[] }> {
    const raw = await spawned.exit;
    const { code, signal } = box.exitOf(raw.code, raw.signal);
    this.mainExited = true;
    clearTimeout(this.limitTimer);
    clearTimeout(this.killTimer);
    const graceMs =
      this.killDeadline === null
        ? this.plan.kill_grace_seconds * 1000
        : Math.max(0, this.killDeadline - this.clock.now());
    await terminateLeftovers(box, graceMs, this.clock);
    const logErrors = await drainPumps(spawned.pumps);
    return { code, signal, logErrors };
  }

  /**
   * Step 2: spawns the box (no shell) as the leader of a new process group and pumps its stdout and
   * stderr to the log files and to `onLog`; resolves `started`. Returns why it could not start.
   */
  private async spawnTask(box: TaskBox, execRoot: string): Promise<Spawned | string> {
    const { command, argv0, args, env, uid, gid, statusPipe, argsData, fileAt } = box.spawn;
    // fd 3: bwrap's JSON status; fd 4: its options (`--args 4`), so they never show on a command line.
    const launcher = this.opts.launcher ?? sharedSpawner();
    const child = await launcher.launch({
      command,
      ...(argv0 === undefined ? {} : { argv0 }),
      args,
      env,
      cwd: box.kind === 'none' ? join(execRoot, 'task') : '/',
      statusPipe: statusPipe === true,
      inputPipe: argsData !== undefined,
      ...(fileAt === undefined ? {} : { fileAt }),
      ...(uid === undefined || gid === undefined ? {} : { uid, gid }),
    });
    if (typeof child === 'string') return `cannot spawn ${JSON.stringify(command)}: ${child}`;
    const exit = child.exit.then((e) => {
      // Nobody can say how it ended (its spawner died): whatever is left of it is killed, and it is lost.
      if (e.lost !== undefined) {
        this.lostReason = e.lost;
        box.kill();
      }
      return e;
    });
    const [, stdout, stderr] = child.stdio;
    // bwrap reads its options (fd 4) before it does anything else: until they are written it runs none of
    // the task's code, so this is where it enters the task's cgroup, and all it forks is born inside. The
    // native sandbox moves itself in, first of all (`selfConfined`).
    const confined =
      box.spawn.selfConfined === true ? null : ((await box.limits?.confine(child.pid)) ?? null);
    if (confined !== null) {
      signalGroup(child.pid, 'SIGKILL');
      stdout?.destroy();
      stderr?.destroy();
      child.stdio[3]?.destroy();
      return confined;
    }
    // bwrap reads its options to the end before anything else; if it dies first, its exit says why.
    if (argsData !== undefined) child.writeInput(argsData);
    box.attach(child);
    const pgid = child.pid;
    this.pid = pgid;
    const pumps: LogPump[] = [];
    // One cap for both streams, the master's default (task-io/log-budget.ts).
    const budget = new LogBudget(this.opts.maxLogBytes ?? DEFAULT_MAX_LOG_BYTES_PER_TASK);
    if (stdout)
      pumps.push(startLogPump('stdout', stdout, join(execRoot, 'stdout.log'), this.opts.onLog, budget));
    if (stderr)
      pumps.push(startLogPump('stderr', stderr, join(execRoot, 'stderr.log'), this.opts.onLog, budget));
    this.resolveStarted(pgid);
    return { exit, pumps };
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

  private beginKill(reason: 'TIMED_OUT' | 'CANCELLED' | 'PREEMPTED'): void {
    const box = this.box;
    if (this.killReason !== null || this.mainExited || this.pid === undefined || box === undefined) return;
    this.killReason = reason;
    // A preempted task has the grace its spec asked for, to checkpoint; anything else the plan's.
    const graceSeconds =
      reason === 'PREEMPTED'
        ? (this.plan.spec.preemption_grace_seconds ?? this.plan.kill_grace_seconds)
        : this.plan.kill_grace_seconds;
    const graceMs = graceSeconds * 1000;
    this.killDeadline = this.clock.now() + graceMs;
    box.terminate(graceSeconds);
    this.killTimer = setTimeout(() => box.kill(), graceMs);
  }

  private neverStarted(
    reason: 'SETUP_FAILED' | 'CANCELLED' | 'PREEMPTED' | 'TIMED_OUT',
    setupError?: string,
  ): ExecutionResult {
    this.resolveStarted(null);
    const exited = exitWithoutTask(reason, setupError);
    this.resolveExited(exited);
    return { ...exited, cleaned: true, cleanup_detail: 'no process was started' };
  }

  /**
   * A bug in the executor must still end in a result, and must not leave the task running, nor its box's
   * cgroup, disk watch and task dir behind (dispose; the receipt still says cleanup is not confirmed).
   */
  private async internalFailure(err: unknown): Promise<ExecutionResult> {
    clearTimeout(this.limitTimer);
    clearTimeout(this.killTimer);
    this.box?.kill();
    await this.box?.dispose().catch(() => undefined);
    this.resolveStarted(this.pid ?? null);
    const exited = exitWithoutTask('SETUP_FAILED', `executor error: ${errorMessage(err)}`);
    this.resolveExited(exited);
    return { ...exited, cleaned: false, cleanup_detail: 'executor failed; cleanup not confirmed' };
  }
}

/**
 * The task's env as files in its execution dir (the bwrap chain's `task.env`, a container's
 * `container.env`): needed only to start it, removed once its run is over, so that what a spec's env
 * held does not stay on the worker's disk until the directory is pruned. Never throws.
 */
async function removeEnvFiles(execRoot: string): Promise<void> {
  for (const name of ['task.env', 'container.env'])
    await rm(join(execRoot, name), { force: true }).catch(() => undefined);
}
