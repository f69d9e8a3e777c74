import { join } from 'node:path';
import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import type { ExecutionHandle, ExecutionResult } from '../../worker/executions/executor.js';
import { type ExecutorOptions, startExecution } from '../../worker/local/executor.js';
import { type BwrapProbe, systemMounts } from '../../worker/sandbox/bwrap.js';
import { makeSimDeviceNodes } from '../../worker/sandbox/devices.js';
import type { SandboxSetup } from '../../worker/sandbox/setup.js';
import { TaskUidPool } from '../../worker/sandbox/task-uids.js';
import { type Chunk, text } from './executor-plan.js';
import { isRoot } from './require-or-skip.js';

/**
 * The sandbox and the run the executor suites that attack the sandbox share (the syscall filter, the
 * kernel's view, named mounts, the task dir's own file system): a bwrap setup as a worker builds it, and
 * one plan run to its end with its logs.
 */

/** A bwrap sandbox setup as a root worker (or, not root, an unprivileged one) builds it. */
export type BwrapSetup = Extract<SandboxSetup, { kind: 'bwrap' }>;

/** What differs between the suites' setups. */
export interface BwrapSetupOptions {
  /** The suite's own task uid range (each suite its own, so that their uids never meet). */
  readonly uids: { readonly first: number; readonly last: number };
  /** Host paths hidden from tasks; default the data dir. */
  readonly hiddenPaths?: readonly string[];
  /** Where the sim cards' device nodes are made; default `<dataDir>/devices`. */
  readonly devicesDir?: string;
  /** Sim cards; default 1. */
  readonly cards?: number;
}

/** The setup over `probe` (which must be ok), with the suite's data dir and `o`. */
export async function bwrapSetupFor(
  probe: BwrapProbe,
  dataDir: string,
  o: BwrapSetupOptions,
): Promise<BwrapSetup> {
  if (probe.bwrap === null || probe.env === null) throw new Error(`no bwrap here: ${probe.detail}`);
  return {
    kind: 'bwrap',
    bwrap: probe.bwrap,
    setpriv: isRoot ? probe.setpriv : null,
    envHelper: probe.env,
    uids: isRoot ? new TaskUidPool(o.uids) : null,
    hiddenPaths: [...(o.hiddenPaths ?? [dataDir])],
    system: systemMounts(),
    simNodes: await makeSimDeviceNodes(o.devicesDir ?? join(dataDir, 'devices'), o.cards ?? 1, isRoot),
  };
}

/** One run to its end: the handle (for `exited`), the result and the task's stdout and stderr. */
export interface RunOutcome {
  readonly handle: ExecutionHandle;
  readonly result: ExecutionResult;
  readonly stdout: string;
  readonly stderr: string;
}

/** Starts `plan` in the local executor under `sandbox` and waits for its result. */
export async function runToEnd(
  plan: ExecutionPlan,
  opts: Pick<ExecutorOptions, 'rootDir' | 'sandbox'> & Partial<Omit<ExecutorOptions, 'onLog'>>,
): Promise<RunOutcome> {
  const chunks: Chunk[] = [];
  const handle = startExecution(plan, {
    workerId: 'worker-under-test',
    provider: 'sim',
    cleanupPollMs: 20,
    ...opts,
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
  });
  const result = await handle.done;
  return { handle, result, stdout: text(chunks, 'stdout'), stderr: text(chunks, 'stderr') };
}
