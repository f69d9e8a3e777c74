/**
 * Unified text diffs for reviewers (ADR 0012): what changed in an input file between two revisions.
 * Pure and bounded (ADR 0031): the common head and tail are cut off first, the middle is
 * compared by Myers' O(N·D) algorithm — cheap for few edits however long the file — counting its work
 * (diagonal steps and line comparisons); past the caller's work limit the middle is shown as removed
 * then added (`whole`) or not diffed at all (`refuse`, when the call's budget is what ran out;
 * src/domain/review/diff-budget.ts). Lines are compared as interned numbers, not strings. The output is cut
 * at `maxLines` with `truncated: true`.
 */

/** Most work one file's comparison does by default; about 5–20 ms here (docs/performance.md). */
export const MAX_DIFF_WORK = 1_000_000;
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

/**
 * The whole unified diff of one file, before paging: what get_revision memoises by digest pair
 * (src/broker/tools/revision-diff.ts), so paging and re-reading cost no comparisons.
 */
export interface DiffScript {
  /** Every line of the unified diff (`@@` headers and ' ', '-', '+' lines). */
  lines: string[];
  added_lines: number;
  removed_lines: number;
  /** Work the comparison did (what a budget is charged). */
  work: number;
}

/** How much a comparison may do, and what happens past it. */
export interface WorkLimit {
  work: number;
  /** `whole`: show the middle removed then added; `refuse`: give up (the answer's budget is spent). */
  over: 'whole' | 'refuse';
}

/**
 * The unified diff script from `before` to `after` (texts), or `{refused}` with the work done when
 * the limit ran out and `limit.over` is `refuse`.
 */
export function diffScript(
  before: string,
  after: string,
  limit: WorkLimit = { work: MAX_DIFF_WORK, over: 'whole' },
): DiffScript | { refused: { work: number } } {
  const d = diffLines(splitLines(before), splitLines(after), limit);
  if ('refused' in d) return d;
  const { ops, work } = d;
  let added = 0;
  let removed = 0;
  for (const o of ops) {
    if (o.kind === '+') added++;
    else if (o.kind === '-') removed++;
  }
  return { lines: hunks(ops), added_lines: added, removed_lines: removed, work };
}

/** Lines `[offset, offset + maxLines)` of a diff script. */
export function pageScript(script: DiffScript, maxLines = 400, offset = 0): TextDiff {
  const out = script.lines;
  return {
    unified: out.slice(offset, offset + maxLines).join('\n'),
    added_lines: script.added_lines,
    removed_lines: script.removed_lines,
    total_lines: out.length,
    truncated: out.length > offset + maxLines,
  };
}

/** The unified diff from `before` to `after` (texts): lines `[offset, offset + maxLines)` of it. */
export function unifiedDiff(before: string, after: string, maxLines = 400, offset = 0): TextDiff {
  return pageScript(diffScript(before, after) as DiffScript, maxLines, offset);
}

function hunks(ops: readonly Op[]): string[] {
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
  return out;
}

function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** The edit script from `a` to `b`; `a`/`b` in each op are the 0-based line numbers before/after. */
function diffLines(
  a: readonly string[],
  b: readonly string[],
  limit: WorkLimit,
): { ops: Op[]; work: number } | { refused: { work: number } } {
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (
    tail < a.length - head &&
    tail < b.length - head &&
    a[a.length - 1 - tail] === b[b.length - 1 - tail]
  )
    tail++;
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  let steps: Step[] | null = null;
  let work = 0;
  if (midA.length > 0 && midB.length > 0) {
    const { x, y, shared } = intern(midA, midB);
    // Nothing in common: the script is the whole middle, no search needed (a rewritten file).
    const found = shared ? myers(x, y, limit.work) : { ops: whole(midA, midB), work: 0 };
    work = found.work;
    if (found.ops) steps = found.ops;
    else if (limit.over === 'refuse') return { refused: { work } };
  }
  steps ??= whole(midA, midB);
  const ops: Op[] = [];
  for (let k = 0; k < head; k++) ops.push({ kind: ' ', line: a[k]!, a: k, b: k });
  for (const s of steps)
    ops.push({ kind: s.kind, line: s.kind === '+' ? midB[s.b]! : midA[s.a]!, a: s.a + head, b: s.b + head });
  for (let k = tail; k > 0; k--)
    ops.push({ kind: ' ', line: a[a.length - k]!, a: a.length - k, b: b.length - k });
  return { ops, work };
}

/** The middle shown as all removed, then all added. */
function whole(a: readonly unknown[], b: readonly unknown[]): Step[] {
  return [
    ...a.map((_, k) => ({ kind: '-' as const, a: k, b: 0 })),
    ...b.map((_, k) => ({ kind: '+' as const, a: a.length, b: k })),
  ];
}

type Step = { kind: ' ' | '-' | '+'; a: number; b: number };

/**
 * Myers' greedy shortest edit script of `x` → `y`, giving up once `limit` work is done (ops null).
 * Keeps each round's frontier (2d+1 numbers) to walk back, so memory grows like work does.
 */
function myers(x: Int32Array, y: Int32Array, limit: number): { ops: Step[] | null; work: number } {
  const n = x.length;
  const m = y.length;
  const max = n + m;
  const off = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace: Int32Array[] = [];
  let work = 0;
  for (let d = 0; d <= max; d++) {
    trace.push(v.slice(off - d, off + d + 1));
    for (let k = -d; k <= d; k += 2) {
      let i =
        k === -d || (k !== d && v[off + k - 1]! < v[off + k + 1]!) ? v[off + k + 1]! : v[off + k - 1]! + 1;
      let j = i - k;
      const from = i;
      while (i < n && j < m && x[i] === y[j]) {
        i++;
        j++;
      }
      work += 1 + i - from; // this diagonal's step and the snake it followed
      v[off + k] = i;
      if (i >= n && j >= m) return { ops: walkBack(trace, n, m), work };
    }
    if (work > limit) return { ops: null, work };
  }
  return { ops: null, work };
}

/** The steps from (0, 0) to (n, m) through the frontiers Myers kept, oldest first. */
function walkBack(trace: readonly Int32Array[], n: number, m: number): Step[] {
  const steps: Step[] = [];
  let i = n;
  let j = m;
  for (let d = trace.length - 1; d > 0; d--) {
    const v = trace[d]!; // the frontier before round d; v[k + d] is diagonal k's reach
    const k = i - j;
    const down = k === -d || (k !== d && v[k - 1 + d]! < v[k + 1 + d]!);
    const pk = down ? k + 1 : k - 1;
    const pi = v[pk + d]!;
    const pj = pi - pk;
    while (i > pi + (down ? 0 : 1) && j > pj + (down ? 1 : 0)) {
      i--;
      j--;
      steps.push({ kind: ' ', a: i, b: j });
    }
    if (down) {
      j--;
      steps.push({ kind: '+', a: i, b: j });
    } else {
      i--;
      steps.push({ kind: '-', a: i, b: j });
    }
  }
  while (i > 0 && j > 0) {
    i--;
    j--;
    steps.push({ kind: ' ', a: i, b: j });
  }
  return steps.reverse();
}

/**
 * Each distinct line as a small number, so comparisons are of integers instead of strings; `shared`:
 * whether any line of `b` is also in `a`.
 */
function intern(
  a: readonly string[],
  b: readonly string[],
): { x: Int32Array; y: Int32Array; shared: boolean } {
  const ids = new Map<string, number>();
  const idOf = (line: string) => {
    let id = ids.get(line);
    if (id === undefined) {
      id = ids.size;
      ids.set(line, id);
    }
    return id;
  };
  const x = Int32Array.from(a, idOf);
  const fromA = ids.size;
  const y = Int32Array.from(b, idOf);
  return { x, y, shared: y.some((id) => id < fromA) };
}
