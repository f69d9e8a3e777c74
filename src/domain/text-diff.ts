/**
 * Unified text diffs for reviewers (issue 13): what changed in an input file between two revisions.
 * Pure and bounded: the common head and tail are cut off first, the middle is compared by a longest
 * common subsequence only up to MAX_DIFF_CELLS (lines before × lines after), beyond which the middle is
 * shown as removed then added; the output is cut at `maxLines` with `truncated: true`.
 */

/** Largest LCS table (lines × lines) computed; about 16 MB of Uint32 at most. */
export const MAX_DIFF_CELLS = 4_000_000;
/** Lines of context around each change. */
const CONTEXT = 3;

/** A unified diff of one file. */
export interface TextDiff {
  /** `@@ -a,b +c,d @@` hunks with ' ', '-', '+' lines, newline-joined. */
  unified: string;
  added_lines: number;
  removed_lines: number;
  /** Lines of the whole unified diff; `unified` holds lines `[offset, offset + maxLines)` of them. */
  total_lines: number;
  /** Lines follow that were cut: ask again with `offset` = this page's offset + its line count. */
  truncated: boolean;
}

type Op = { kind: ' ' | '-' | '+'; line: string; a: number; b: number };

/** The unified diff from `before` to `after` (texts): lines `[offset, offset + maxLines)` of it. */
export function unifiedDiff(before: string, after: string, maxLines = 400, offset = 0): TextDiff {
  const a = splitLines(before);
  const b = splitLines(after);
  const ops = diffLines(a, b);
  const added = ops.filter((o) => o.kind === '+').length;
  const removed = ops.filter((o) => o.kind === '-').length;
  const out: string[] = [];
  let i = 0;
  while (i < ops.length) {
    if (ops[i]!.kind === ' ') {
      i++;
      continue;
    }
    // A hunk: from CONTEXT lines before this change to CONTEXT lines after the last change that is
    // at most 2×CONTEXT unchanged lines from the next.
    const start = Math.max(0, i - CONTEXT);
    let end = i;
    let lastChange = i;
    while (end < ops.length) {
      if (ops[end]!.kind !== ' ') lastChange = end;
      else if (end - lastChange > 2 * CONTEXT) break;
      end++;
    }
    end = Math.min(ops.length, lastChange + CONTEXT + 1);
    const hunk = ops.slice(start, end);
    const aLines = hunk.filter((o) => o.kind !== '+').length;
    const bLines = hunk.filter((o) => o.kind !== '-').length;
    const aStart = hunk.find((o) => o.kind !== '+')?.a ?? hunk[0]!.a;
    const bStart = hunk.find((o) => o.kind !== '-')?.b ?? hunk[0]!.b;
    out.push(`@@ -${aStart + (aLines ? 1 : 0)},${aLines} +${bStart + (bLines ? 1 : 0)},${bLines} @@`);
    for (const o of hunk) out.push(`${o.kind}${o.line}`);
    i = end;
  }
  return {
    unified: out.slice(offset, offset + maxLines).join('\n'),
    added_lines: added,
    removed_lines: removed,
    total_lines: out.length,
    truncated: out.length > offset + maxLines,
  };
}

function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** The edit script from `a` to `b`; `a`/`b` in each op are the 0-based line numbers before/after. */
function diffLines(a: readonly string[], b: readonly string[]): Op[] {
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (
    tail < a.length - head &&
    tail < b.length - head &&
    a[a.length - 1 - tail] === b[b.length - 1 - tail]
  )
    tail++;
  const ops: Op[] = [];
  for (let k = 0; k < head; k++) ops.push({ kind: ' ', line: a[k]!, a: k, b: k });
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  for (const op of middle(midA, midB)) ops.push({ ...op, a: op.a + head, b: op.b + head });
  for (let k = tail; k > 0; k--)
    ops.push({ kind: ' ', line: a[a.length - k]!, a: a.length - k, b: b.length - k });
  return ops;
}

function middle(a: readonly string[], b: readonly string[]): Op[] {
  const n = a.length;
  const m = b.length;
  if (n * m > MAX_DIFF_CELLS || n === 0 || m === 0) {
    return [
      ...a.map((line, k) => ({ kind: '-' as const, line, a: k, b: 0 })),
      ...b.map((line, k) => ({ kind: '+' as const, line, a: n, b: k })),
    ];
  }
  // lcs[i][j] = LCS length of a[i..] and b[j..], row-major in one array.
  const w = m + 1;
  const lcs = new Uint32Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      lcs[i * w + j] =
        a[i] === b[j] ? lcs[(i + 1) * w + j + 1]! + 1 : Math.max(lcs[(i + 1) * w + j]!, lcs[i * w + j + 1]!);
  const ops: Op[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      ops.push({ kind: ' ', line: a[i]!, a: i, b: j });
      i++;
      j++;
    } else if (i < n && (j === m || lcs[(i + 1) * w + j]! >= lcs[i * w + j + 1]!)) {
      ops.push({ kind: '-', line: a[i]!, a: i, b: j });
      i++;
    } else {
      ops.push({ kind: '+', line: b[j]!, a: i, b: j });
      j++;
    }
  }
  return ops;
}
