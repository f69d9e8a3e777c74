import { chownSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import { errorMessage } from '../../src/platform/error-message.js';
import { bwrapArgs, bwrapCommandLine, hiddenMounts, taskEnvData, taskEnvProblem } from '../sandbox/bwrap.js';
import { deviceNodesFor } from '../sandbox/devices.js';
import { HELPER_ENV } from '../sandbox/helper-commands.js';
import type { TaskLimits } from '../sandbox/limits.js';
import type { SandboxSetup } from '../sandbox/setup.js';
import { taskBwrapRequest, taskHiddenPaths } from '../sandbox/task-bwrap.js';
import type { ExecutorProvider } from '../task-io/env.js';
import type { ResolvedMount } from '../task-io/mounts.js';
import type { TaskBox } from './box.js';
import { bwrapBox } from './box.js';
import { FIRST_FILE_FD } from './launch.js';

/**
 * The box of a sandboxed `process` task (sandbox/bwrap.ts for what the sandbox holds). The executor has
 * made the execution's directories and placed its inputs; this picks the device nodes, the paths to hide
 * and to pin, and assembles bwrap's start: options through a pipe, the task's env applied at the task's
 * own exec only, bwrap itself with the fixed helper env (docs/security.md "Code the reviewer did not read").
 */

/** Everything one bwrap box needs from the executor. */
export interface BwrapBoxRequest {
  readonly plan: ExecutionPlan;
  readonly sandbox: Extract<SandboxSetup, { kind: 'bwrap' }>;
  readonly provider: ExecutorProvider;
  /** The host dir bound at /task. */
  readonly taskDir: string;
  /** The host dir holding the placed inputs. */
  readonly inputsDir: string;
  /** The named data mounts, resolved. */
  readonly mounts: readonly ResolvedMount[];
  /** The task's uid/gid on a root worker; null when bwrap runs unprivileged. */
  readonly identity: { uid: number; gid: number } | null;
  /** The task's environment (task-io/env.ts buildTaskEnv). */
  readonly env: Readonly<Record<string, string>>;
  /** The task's resource limits as set up on this host (sandbox/limits.ts); null: the plan has none. */
  readonly limits: TaskLimits | null;
}

/** The box, or why the task cannot start (SETUP_FAILED). */
export function bwrapBoxFor(req: BwrapBoxRequest): TaskBox | string {
  const { plan, sandbox } = req;
  // What the task runs: the scheduler's argv (a script from the inputs in its interpreter's isolated
  // mode, src/domain/policy/run-argv.ts), else the spec's.
  const argv = plan.argv ?? plan.spec.runtime.argv;
  let devices: ReturnType<typeof deviceNodesFor>;
  try {
    devices = deviceNodesFor(req.provider, plan.cards, {
      ...(sandbox.simNodes === undefined ? {} : { simNodes: sandbox.simNodes }),
      ...(sandbox.devDir === undefined ? {} : { devDir: sandbox.devDir }),
      ...(sandbox.migMinorsPath === undefined ? {} : { migMinorsPath: sandbox.migMinorsPath }),
    });
  } catch (err) {
    return errorMessage(err);
  }
  // bwrap's own env: the fixed one, plus the execution id (worker-made, a safe segment) by which a
  // restarted worker recognises its process group (recovery.ts).
  const env = { ...HELPER_ENV, GPU_BROKER_EXECUTION_ID: plan.execution_id };
  // A root worker drops each task to its uid: in the native sandbox itself (ADR 0038), else through setpriv.
  const native = req.identity === null ? null : (sandbox.native ?? null);
  // The native sandbox moves itself into the task's cgroups before anything else, so the executor need
  // not move it (three v1 migrations, each a wait in the kernel) nor hold its options back until then.
  const cgroupProcs = (req.limits?.cgroupDirs ?? []).map((dir) => join(dir, 'cgroup.procs'));
  const dropTo =
    req.identity === null
      ? null
      : native !== null
        ? { ...req.identity, native: true as const, cgroupProcs }
        : sandbox.setpriv === null
          ? null
          : { ...req.identity, setpriv: sandbox.setpriv };
  const problem = taskEnvProblem(argv, req.env, dropTo !== null && 'setpriv' in dropTo);
  if (problem !== null) return problem;
  // Behind setpriv the env travels in a file of the task's own, read after the uid drop (bwrap.ts
  // TASK_ENV_FILE), never on the command line the host's process list shows.
  let envFile: { host: string; shell: string } | undefined;
  if (dropTo !== null && 'setpriv' in dropTo && sandbox.shell != null) {
    const host = join(dirname(req.taskDir), 'task.env');
    try {
      writeFileSync(host, taskEnvData(req.env), { mode: 0o400, flag: 'wx' });
      chownSync(host, dropTo.uid, dropTo.gid);
    } catch (err) {
      return `cannot write the task's env file: ${errorMessage(err)}`;
    }
    envFile = { host, shell: sandbox.shell };
  }
  // The syscall filter: the native sandbox takes the program in its options; bwrap reads it from fd 5,
  // which the launcher opens on the filter's file in the data dir (never on a command line or in the task).
  const seccomp = sandbox.seccomp ?? null;
  const nativeDrop = dropTo !== null && 'native' in dropTo;
  const args = bwrapArgs({
    ...taskBwrapRequest(plan, sandbox, req, req.mounts),
    hidden: hiddenMounts(taskHiddenPaths(sandbox, plan)),
    devices,
    identity: dropTo,
    statusFd: 3,
    ...(seccomp === null ? {} : { seccomp: nativeDrop ? { program: seccomp.program } : { fd: SECCOMP_FD } }),
    // The env reaches the task's own exec only; bwrap and setpriv run with the fixed env below.
    taskEnv: {
      vars: req.env,
      envHelper: sandbox.envHelper,
      bwrapEnvNames: Object.keys(env),
      ...(envFile === undefined ? {} : { file: envFile }),
    },
  });
  const line = bwrapCommandLine(args, 4);
  // The native sandbox by its bare name: its command line is the task's /proc/1/cmdline, and names no host path.
  const command =
    native === null ? { command: sandbox.bwrap } : { command: native, argv0: 'gpu-broker-sandbox' };
  const selfConfined = native !== null && cgroupProcs.length > 0;
  const fileAt = seccomp !== null && !nativeDrop ? { fileAt: { fd: SECCOMP_FD, path: seccomp.file } } : {};
  return bwrapBox(
    { ...command, args: line.argv, env, argsData: line.data, selfConfined, ...fileAt },
    req.limits,
  );
}

/** The descriptor bwrap reads the syscall filter from (`--seccomp 5`). */
const SECCOMP_FD = FIRST_FILE_FD;
