import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../src/platform/logger.js';
import type { LocalStore } from '../store/local-store.js';

/**
 * Retention of finished execution directories (docs/operations.md "Audit retention"): each keeps its logs (about 18 kB per task in
 * the soak) under `<dataDir>/executions/<execution_id>/` after the master has everything. A directory is
 * deleted only when the store says it is safe (`listPrunableExecutionDirs`: cleaned or rejected, older
 * than `keep_seconds`, not among the newest `keep_count`, nothing about it still unacknowledged); the
 * execution's record stays, so `hello` still reports it.
 */

/** Worker knobs for execution-directory retention (`gpu-broker worker --keep-executions …`). */
export interface ExecutionRetention {
  /** The newest finished executions whose directories are always kept. */
  keep_count: number;
  /** Directories of executions finished more recently than this are kept. */
  keep_seconds: number;
}

/** Defaults: the last 200 executions, and everything from the last 3 days. */
export const DEFAULT_EXECUTION_RETENTION: ExecutionRetention = { keep_count: 200, keep_seconds: 3 * 86_400 };

/** How many directories one pass deletes at most, so a first pass on an old worker stays short. */
const PRUNE_BATCH = 500;

/** Deletes the directories retention lets go; returns the execution ids whose directory was removed. */
export function pruneExecutionDirs(
  store: LocalStore,
  executionsDir: string,
  now: number,
  retention: ExecutionRetention,
  logger?: Logger,
): string[] {
  const ids = store.listPrunableExecutionDirs(
    now - retention.keep_seconds * 1000,
    retention.keep_count,
    PRUNE_BATCH,
  );
  const removed: string[] = [];
  for (const id of ids) {
    // Ids come from master plans (schema-checked); refuse anything that could leave the folder anyway.
    if (!/^[A-Za-z0-9_-]+$/.test(id)) continue;
    try {
      rmSync(join(executionsDir, id), { recursive: true, force: true });
      store.markExecutionDirPruned(id);
      removed.push(id);
    } catch (err) {
      logger?.warn({ err, execution_id: id }, 'worker: could not delete an execution directory');
    }
  }
  if (removed.length > 0)
    logger?.info({ count: removed.length }, 'worker: pruned finished execution directories');
  return removed;
}
