import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/platform/package-root.js';

/**
 * Where the qualification workload is and what it writes: the names the master's policy (the pin), the
 * runner, the task spec and the verifier share.
 */

/** The workload script, relative to the package root. The master's policy pins it by sha256. */
export const WORKLOAD_RELATIVE_PATH = 'qualification/workload/qualify.py';

/** Name of the result file the workload writes into GPU_BROKER_OUTPUT_DIR. */
export const WORKLOAD_RESULT_FILE = 'qualification.json';

/** Absolute path of the workload script in this installation (source tree or built package). */
export function workloadPath(root: string = packageRoot()): string {
  return join(root, WORKLOAD_RELATIVE_PATH);
}

/** Lower-case hex sha256 of the workload script's bytes, the value the master's policy pins. */
export function workloadSha256(root: string = packageRoot()): string {
  return createHash('sha256')
    .update(readFileSync(workloadPath(root)))
    .digest('hex');
}
