import { BrokerError } from '../../src/contracts/errors.js';
import { firstUntraversable, octal, secureDataDir, type Tightened } from '../../src/platform/file-modes.js';
import type { RunAs } from '../sandbox/run-as.js';

/**
 * The worker's data dir modes (docs/security.md "File modes"). worker.sqlite holds every output a task
 * returned and the fencing marks: it and its -wal/-shm are 0600, the dir 0700.
 *
 * With `--isolation none --run-as USER` tasks reach their execution dirs through the host path
 * `<dataDir>/executions/<id>/`, so the dir is 0711 instead (pass through, not list) and every dir from /
 * down to it must be searchable by USER. We check that at start and refuse with what to change, rather
 * than loosen modes ourselves: a dir an operator made 0700 (or a 0700 home above it) is a choice we must
 * not silently undo, and the alternative layout — an execution root outside the data dir — would add a
 * second tree to secure and hide for no gain. The executor makes `executions/` and each execution root
 * 0711 itself (local/executor.ts). Sandboxed tasks need none of this: bwrap (run by the worker) binds the task
 * dir at /task, so the data dir stays 0700.
 */

/** The worker's secret files, relative to its data dir. */
export const WORKER_SECRET_FILES = ['worker.sqlite', 'worker.sqlite-wal', 'worker.sqlite-shm'] as const;

/** Secures the worker's data dir; with `runAs`, also refuses a path that user cannot traverse. */
export function secureWorkerDataDir(dataDir: string, runAs?: RunAs): Tightened[] {
  const changed = secureDataDir({
    dir: dataDir,
    dirMode: runAs === undefined ? 0o700 : 0o711,
    files: WORKER_SECRET_FILES,
  });
  if (runAs !== undefined) assertTraversable(dataDir, runAs);
  return changed;
}

/** Throws a BrokerError saying what to change when `runAs` cannot search every dir down to `dir`. */
export function assertTraversable(dir: string, runAs: RunAs): void {
  const blocked = firstUntraversable(dir, runAs);
  if (blocked === null) return;
  throw new BrokerError(
    'INVALID_INPUT',
    `--run-as ${runAs.name} (uid ${runAs.uid}, gid ${runAs.gid}) cannot traverse ${blocked.path} (mode ${octal(blocked.mode)}, owner uid ${blocked.owner}, group ${blocked.group}), so its tasks could not reach their execution dirs under ${dir}`,
    `Run \`chmod o+x ${blocked.path}\` (0711 lets it pass through without listing), or choose a --data-dir it can reach, or drop --run-as and use the sandbox (--isolation auto).`,
  );
}
