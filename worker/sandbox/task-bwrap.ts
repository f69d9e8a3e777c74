import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import { inputEntries, type TaskLayout } from '../task-io/layout.js';
import type { ResolvedMount } from '../task-io/mounts.js';
import { ALWAYS_HIDDEN, type BwrapRequest, programBinds } from './bwrap.js';
import type { SandboxSetup } from './setup.js';

/**
 * The part of a task's bwrap request that does not depend on where the task runs, shared by the local
 * executor (local/bwrap-box.ts) and the Slurm one (slurm/job-setup.ts, for each rank): the system tree,
 * the task dir, the program and pinned files, the network, the inputs, the named mounts and the sizes of
 * /tmp and /dev/shm (the plan's limits). Each adds
 * what only it knows: the hidden paths as it can check them, the devices, the uid drop and the env.
 */

/** The shared fields of the task's BwrapRequest; pure but for programBinds' look at what exists. */
export function taskBwrapRequest(
  plan: ExecutionPlan,
  setup: Extract<SandboxSetup, { kind: 'bwrap' }>,
  layout: Pick<TaskLayout, 'taskDir' | 'inputsDir'>,
  mounts: readonly ResolvedMount[],
): Pick<
  BwrapRequest,
  'system' | 'taskDir' | 'pinned' | 'network' | 'argv' | 'inputs' | 'mounts' | 'tmpfsBytes'
> {
  // What the task runs: the scheduler's argv (a script from the inputs in its interpreter's isolated
  // mode, src/domain/policy/run-argv.ts), else the spec's.
  const argv = plan.argv ?? plan.spec.runtime.argv;
  return {
    system: setup.system,
    taskDir: layout.taskDir,
    pinned: programBinds(
      argv[0],
      (plan.pins ?? []).map((p) => p.path),
    ),
    network: plan.spec.network ?? 'none',
    argv,
    inputs: { dir: layout.inputsDir, entries: inputEntries(plan.spec.inputs ?? []) },
    mounts,
    ...(plan.limits === undefined
      ? {}
      : { tmpfsBytes: { tmp: plan.limits.tmp_mib * MIB, shm: plan.limits.shm_mib * MIB } }),
  };
}

const MIB = 1024 * 1024;

/**
 * The host paths a task's sandbox hides: the worker's data dirs (setup.hiddenPaths), ALWAYS_HIDDEN, the
 * executor's own (`extra`: a Slurm worker's job dir) and the policy's `hidden_paths`.
 */
export function taskHiddenPaths(
  setup: Extract<SandboxSetup, { kind: 'bwrap' }>,
  plan: ExecutionPlan,
  extra: readonly string[] = [],
): string[] {
  return [...setup.hiddenPaths, ...ALWAYS_HIDDEN, ...extra, ...(plan.hidden_paths ?? [])];
}
