/**
 * How much work one reviewer's diff may do (ADR 0031). One get_revision over ~1,000 modified
 * files held the event loop for 20 s: every file was read, re-hashed and compared line by line however
 * many there were. Now one call has a budget — blob bytes read and line comparisons (the LCS table's
 * work) — and each file a limit; a file past either is not diffed, with an entry saying so and how to
 * read it instead. The shell (src/broker/tools/revision-diff.ts) also yields to the event loop between
 * files, so no slice holds it for longer than one file's work, which the per-file limits bound.
 *
 * Measured here (docs/performance.md): Myers' comparison does about 100–200 units of work a µs (1M ≈
 * 5–10 ms idle, several times that on a loaded machine), sha256 about 0.6 ms a MiB. The defaults keep
 * one file's slice near 10 ms and one call's work well under a second.
 *
 * Pure: decisions and the reviewer-facing words are data; the shell reads, counts and applies them.
 */

import { MAX_DIFF_WORK, type WorkLimit } from './text-diff.js';

/** The limits of one diff call and of each file in it. */
export interface DiffBudget {
  /** Largest blob (either side) compared as text; larger ones are read with get_input. */
  file_bytes: number;
  /** Most comparison work one file does; past it its changed middle is shown whole (removed, added). */
  file_work: number;
  /** Blob bytes one call reads (both sides of every file it diffs). */
  call_bytes: number;
  /** Comparison work one call does over all its files. */
  call_work: number;
}

/** The defaults; see the file comment for how they were sized. */
export const DEFAULT_DIFF_BUDGET: Readonly<DiffBudget> = {
  file_bytes: 512 * 1024,
  file_work: MAX_DIFF_WORK,
  call_bytes: 16 * 1024 * 1024,
  call_work: 16 * MAX_DIFF_WORK,
};

/** What is left of a call's budget; the shell subtracts what each file used. */
export interface BudgetLeft {
  bytes: number;
  work: number;
}

/** Why a file's changes are not diffed (the reviewer pages it or reads it with get_input instead). */
export type NotDiffed =
  | { reason: 'file_too_large'; unit: 'bytes'; size: number; budget: number }
  | { reason: 'call_budget_spent'; unit: 'bytes' | 'comparisons'; size: number; budget: number };

/** The budget a call starts with. */
export function fullBudget(budget: DiffBudget): BudgetLeft {
  return { bytes: budget.call_bytes, work: budget.call_work };
}

/**
 * Before reading: may a file whose sides are `beforeBytes` and `afterBytes` long be read for a diff?
 * Null: yes (and the caller charges the bytes); else why not.
 */
export function admitRead(
  beforeBytes: number,
  afterBytes: number,
  left: BudgetLeft,
  budget: DiffBudget,
): NotDiffed | null {
  const largest = Math.max(beforeBytes, afterBytes);
  if (largest > budget.file_bytes)
    return { reason: 'file_too_large', unit: 'bytes', size: largest, budget: budget.file_bytes };
  // Nothing left to compare with: reading would only waste the bytes.
  if (left.work <= 0) return { reason: 'call_budget_spent', unit: 'comparisons', size: 0, budget: 0 };
  const bytes = beforeBytes + afterBytes;
  if (bytes > left.bytes)
    return { reason: 'call_budget_spent', unit: 'bytes', size: bytes, budget: left.bytes };
  return null;
}

/**
 * How much one file's comparison may do: the per-file limit (past which the change is shown whole),
 * or what is left of the call when that is less (past which the file is not diffed).
 */
export function compareLimit(left: BudgetLeft, budget: DiffBudget): WorkLimit {
  return left.work >= budget.file_work
    ? { work: budget.file_work, over: 'whole' }
    : { work: left.work, over: 'refuse' };
}

/** The "not diffed" entry of a file whose comparison gave up after `work` with `left` to spend. */
export function workSpent(work: number, left: BudgetLeft): NotDiffed {
  return { reason: 'call_budget_spent', unit: 'comparisons', size: work, budget: left.work };
}

/** The reviewer-facing line for a file that was not diffed; every view (MCP, REST, dashboard, CLI) shows it. */
export function notDiffedNote(why: NotDiffed): string {
  const n = (x: number) => x.toLocaleString('en-US');
  if (why.reason === 'file_too_large')
    return `not diffed: too large (${n(why.size)} bytes, budget ${n(why.budget)} bytes per file); read it with get_input`;
  if (why.unit === 'comparisons' && why.budget === 0)
    return "not diffed: this answer's comparison budget is spent; page it with diff_path, or read it with get_input";
  const need = why.unit === 'bytes' ? `${n(why.size)} bytes to read` : `over ${n(why.size)} line comparisons`;
  return `not diffed: too large for this answer (${need}, budget ${n(why.budget)} ${why.unit === 'bytes' ? 'bytes' : 'comparisons'} left); page it with diff_path, or read it with get_input`;
}
