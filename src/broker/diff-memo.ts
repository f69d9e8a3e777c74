import type { DiffScript } from '../domain/review/text-diff.js';

/**
 * The reviewer's file diffs memoised by (base digest, new digest) (ADR 0031): a reviewer pages
 * a diff, re-reads a revision, and several reviewers read the same one; each of those used to redo the
 * comparison. Digests name bytes, so an entry is right for as long as the digests are; it is never a
 * way around ownership, which tools/revision-diff.ts checks before every lookup. One per master
 * (`deps.runtime.diffs`, src/broker/runtime.ts).
 *
 * Bounded by the characters it holds (least recently used first out), so a flood of distinct diffs
 * costs the master at most `maxChars` of memory here.
 */

/** A memoised outcome: the script, or the note that says why there is none (binary, not stored…). */
export type MemoEntry = { script: DiffScript } | { note: string };

/** Default bound: 16 M characters (32 MiB at most as UTF-16). */
export const DIFF_MEMO_CHARS = 16 * 1024 * 1024;

/** A bounded LRU of diff outcomes by digest pair. */
export class DiffMemo {
  private readonly entries = new Map<string, { entry: MemoEntry; chars: number }>();
  private chars = 0;

  constructor(private readonly maxChars = DIFF_MEMO_CHARS) {}

  /** The key of a pair; `before` null is the empty file (an added path). */
  static key(before: string | null, after: string): string {
    return `${before ?? '-'}:${after}`;
  }

  /** The outcome for `key`, now the most recently used; undefined when absent. */
  get(key: string): MemoEntry | undefined {
    const hit = this.entries.get(key);
    if (!hit) return undefined;
    this.entries.delete(key);
    this.entries.set(key, hit);
    return hit.entry;
  }

  /** Remembers an outcome; one larger than the whole bound is not kept. */
  set(key: string, entry: MemoEntry): void {
    const chars =
      'note' in entry ? entry.note.length : entry.script.lines.reduce((n, l) => n + l.length + 1, 0);
    const old = this.entries.get(key);
    if (old) {
      this.entries.delete(key);
      this.chars -= old.chars;
    }
    if (chars > this.maxChars) return;
    this.entries.set(key, { entry, chars });
    this.chars += chars;
    for (const [k, v] of this.entries) {
      if (this.chars <= this.maxChars) break;
      this.entries.delete(k);
      this.chars -= v.chars;
    }
  }

  /** Characters held (for tests and metrics). */
  size(): { entries: number; chars: number } {
    return { entries: this.entries.size, chars: this.chars };
  }
}
