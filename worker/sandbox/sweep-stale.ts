import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../src/platform/logger.js';
import type { CgroupHierarchy } from './cgroups.js';
import { removeTaskDir } from './task-dir.js';

/**
 * What a crashed worker left on its host (docs/performance.md "Noisy neighbours"): a task's cgroup (with whatever still ran in it)
 * and its task dir (scratch) are removed when the task ends, so a worker killed mid-task leaves both
 * behind. At start, once recovery has reported and stopped the previous process's executions
 * (local/recovery.ts), the worker sweeps:
 *
 *   cgroups    below its own cgroup's `gpu-broker/`, each one named after an execution this worker's
 *              store knows and that is not running now: what is inside is killed, the cgroup removed.
 *              Any other name there (another worker's task in the same parent cgroup, a probe) is left
 *              alone: the worker touches only what it made.
 *   task dirs  `<executions>/<id>/task` of each known execution that is not running: removed, the logs
 *              beside it kept (as at a normal end; dir retention deletes the rest later).
 *
 * One log line per sweep that removed anything. Never throws.
 */

/** What the sweep asks of the worker. */
export interface SweepDeps {
  /** The worker's cgroup hierarchy for task limits; null where it has none. */
  readonly cgroups: CgroupHierarchy | null;
  /** `<dataDir>/executions`. */
  readonly executionsDir: string;
  /** Whether this worker's store has a record of execution `id` (so it made that cgroup and dir). */
  readonly known: (id: string) => boolean;
  /** The executions running now; read after the listing, so one that starts meanwhile is never swept. */
  readonly running: () => ReadonlySet<string>;
  readonly logger: Logger;
}

/** What one sweep removed. */
export interface SweepResult {
  readonly cgroups: string[];
  readonly taskDirs: string[];
}

/** Execution ids are safe path segments (master plans, schema-checked); anything else is not ours. */
const SAFE_ID = /^[A-Za-z0-9_-]+$/;

/** Sweeps once; see the module comment. */
export async function sweepStale(deps: SweepDeps): Promise<SweepResult> {
  const cgroupNames = deps.cgroups === null ? [] : await listNames(deps.cgroups.bases);
  const execNames = await listNames([deps.executionsDir]);
  const running = deps.running();
  const stale = (id: string) => SAFE_ID.test(id) && !running.has(id) && deps.known(id);
  const removed: SweepResult = { cgroups: [], taskDirs: [] };
  for (const name of cgroupNames.filter(stale)) {
    const cg = deps.cgroups!.adopt(name);
    await cg.killAll();
    if (await cg.remove()) removed.cgroups.push(name);
    else deps.logger.warn({ execution_id: name }, 'worker: a stale task cgroup could not be removed');
  }
  for (const id of execNames.filter(stale)) {
    const dir = join(deps.executionsDir, id, 'task');
    if ((await readdir(dir).catch(() => null)) === null) continue;
    await removeTaskDir(dir);
    removed.taskDirs.push(id);
  }
  if (removed.cgroups.length + removed.taskDirs.length > 0)
    deps.logger.info(
      { cgroups: removed.cgroups.length, task_dirs: removed.taskDirs.length },
      `worker: swept what a previous process left: ${removed.cgroups.length} task cgroup(s), ${removed.taskDirs.length} task dir(s)`,
    );
  return removed;
}

/** The names in `dirs` (union); none where a dir is missing. */
async function listNames(dirs: readonly string[]): Promise<string[]> {
  const names = new Set<string>();
  for (const dir of dirs) for (const n of await readdir(dir).catch(() => [] as string[])) names.add(n);
  return [...names].sort();
}
