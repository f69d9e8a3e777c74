import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Temporary directories for tests. Every directory made here is removed by `removeTempDirs()`, which
 * the master harness calls on close; tests that make their own call it in `afterAll`, or remove one
 * with `removeTempDir`. A crashed test run leaves at most a few small folders under the OS tmpdir.
 */

const made = new Set<string>();

/** Creates a fresh, empty directory under the OS tmpdir (`gpu-broker-<prefix>-XXXXXX`). */
export function makeTempDir(prefix = 'test'): string {
  const dir = mkdtempSync(join(tmpdir(), `gpu-broker-${prefix}-`));
  made.add(dir);
  return dir;
}

/**
 * A directory for gate files that tasks wait on (`while [ ! -e GATE ]`). Sandboxed tasks have a private
 * /tmp, so it is made under /var/tmp, which every sandbox binds read-only: the test writes the gate, the
 * task sees it appear. Removed by `removeTempDirs()` like the others.
 */
export function makeGateDir(prefix = 'gates'): string {
  const dir = mkdtempSync(join('/var/tmp', `gpu-broker-${prefix}-`));
  chmodSync(dir, 0o755);
  made.add(dir);
  return dir;
}

/** Removes one directory made by `makeTempDir` (or any path), recursively; missing is fine. */
export function removeTempDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  made.delete(dir);
}

/** Removes every directory `makeTempDir` made in this process that is still there. */
export function removeTempDirs(): void {
  for (const dir of [...made]) removeTempDir(dir);
}
