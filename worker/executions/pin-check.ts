import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { writableByOthers } from '../task-io/mounts.js';

/**
 * Verifies the plan's sha256 pins on this host before anything runs: the master checked its own copy
 * of a pinned executable or script, but the bytes that run are the worker's.
 * Returns null when every pin matches, or a message naming the first mismatch.
 */
export function pinsProblem(pins: ReadonlyArray<{ path: string; sha256: string }>): string | null {
  for (const pin of pins) {
    let actual: string;
    try {
      actual = createHash('sha256').update(readFileSync(pin.path)).digest('hex');
    } catch (err) {
      return `pinned file ${pin.path} cannot be read on this worker: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
    }
    if (actual !== pin.sha256)
      return `pinned file ${pin.path} has sha256 ${actual} on this worker; policy pins ${pin.sha256}`;
    // Checked now, run later (after the master's ack, bound by the sandbox then): bytes someone else may
    // change, or a directory on the way they may swap for a link, make the pin mean nothing.
    let other: string | null;
    try {
      other = writableByOthers(pin.path, true);
    } catch (err) {
      return `pinned file ${pin.path} cannot be checked on this worker: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`;
    }
    if (other !== null)
      return `pinned file ${pin.path} could be changed by another user after its check: ${other}; pin a file only root can change`;
  }
  return null;
}
