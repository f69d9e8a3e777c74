import { escapeField } from '../common/output.js';
import { type CollectedInputs, type LeftOutInput, SYMLINK_WHY } from './propose-files.js';
import type { DirMemory } from './ship-memory.js';

/**
 * What `gpu-broker run` and `propose --dir` say about what they ship (docs/security.md "gpu-broker run on the submitter’s machine"): the whole listing
 * (count, total bytes, each file and its size) with `--dry-run` and before the first run of a directory,
 * the files not shipped before on later runs, and what was left out and why. Paths are escaped for the
 * terminal: a file name is text someone else may have chosen.
 */

/** Files listed before a first run; `--dry-run` lists them all. */
export const FIRST_RUN_LISTED = 200;
/** New files named on a later run. */
const NEW_FILES_NAMED = 20;

/** A size for people: bytes, KiB, MiB or GiB with one decimal. */
export function sizeText(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${units[u]}`;
}

/** The listing: a header line, then one line per file (at most `limit`, then how many more). */
export function shipListing(dir: string, c: CollectedInputs, limit = Number.POSITIVE_INFINITY): string[] {
  const lines = [
    `${c.files.length} file(s), ${sizeText(c.totalBytes)} (${c.totalBytes} bytes) from ${escapeField(dir)}:`,
  ];
  for (const f of c.files.slice(0, limit))
    lines.push(`  ${sizeText(f.size).padStart(10)}  ${escapeField(f.path)}`);
  if (c.files.length > limit)
    lines.push(`  … and ${c.files.length - limit} more (gpu-broker run --dry-run lists them all)`);
  return lines;
}

/**
 * What to say before shipping: the listing on a first run of the directory (no memory), else the files
 * not shipped last time (nothing when there are none).
 */
export function shipNotice(dir: string, c: CollectedInputs, memory: DirMemory | undefined): string[] {
  if (memory === undefined)
    return [
      'first run from this directory (this user has not shipped it before); it ships:',
      ...shipListing(dir, c, FIRST_RUN_LISTED),
    ];
  const before = new Set(memory.shipped);
  const added = c.files.filter((f) => !before.has(f.path)).map((f) => escapeField(f.path));
  if (added.length === 0) return [];
  const more = added.length > NEW_FILES_NAMED ? `, … and ${added.length - NEW_FILES_NAMED} more` : '';
  return [`${added.length} file(s) not shipped before: ${added.slice(0, NEW_FILES_NAMED).join(', ')}${more}`];
}

/** One line per reason files were left out: code an interpreter loads on its own; symbolic links. */
export function leftOutLines(leftOut: readonly LeftOutInput[]): string[] {
  const links = leftOut.filter((l) => l.why === SYMLINK_WHY);
  const implicit = leftOut.filter((l) => l.why !== SYMLINK_WHY);
  const lines: string[] = [];
  if (implicit.length > 0) {
    const reasons = [...new Set(implicit.map((l) => l.why))];
    lines.push(
      `${implicit.length} file(s) left out: an interpreter would load them on its own, unreviewed (${reasons.join('; ')}); e.g. ${escapeField(implicit[0]?.path ?? '')}`,
    );
  }
  if (links.length > 0)
    lines.push(
      `${links.length} symbolic link(s) left out, never followed: ${links
        .slice(0, NEW_FILES_NAMED)
        .map((l) => escapeField(l.path))
        .join(', ')}${links.length > NEW_FILES_NAMED ? ', …' : ''}`,
    );
  return lines;
}
