import { describe, expect, it } from 'vitest';
import { MAX_DIFF_CELLS, unifiedDiff } from '../../../src/domain/text-diff.js';

const lines = (n: number, f: (i: number) => string = (i) => `line ${i}`) =>
  `${Array.from({ length: n }, (_, i) => f(i + 1)).join('\n')}\n`;

describe('unifiedDiff', () => {
  it('shows a change with three lines of context and hunk headers', () => {
    const before = lines(20);
    const after = before.replace('line 10\n', 'line ten\n');
    const d = unifiedDiff(before, after);
    expect(d.unified).toBe(
      [
        '@@ -7,7 +7,7 @@',
        ' line 7',
        ' line 8',
        ' line 9',
        '-line 10',
        '+line ten',
        ' line 11',
        ' line 12',
        ' line 13',
      ].join('\n'),
    );
    expect(d).toMatchObject({ added_lines: 1, removed_lines: 1, truncated: false });
  });

  it('separates distant changes into hunks and handles added and removed files', () => {
    const after = lines(40).replace('line 2\n', 'two\n').replace('line 35\n', 'thirty-five\n');
    expect(unifiedDiff(lines(40), after).unified.match(/^@@/gm)).toHaveLength(2);
    expect(unifiedDiff('', 'a\nb\n').unified).toBe('@@ -0,0 +1,2 @@\n+a\n+b');
    expect(unifiedDiff('a\n', '').unified).toBe('@@ -1,1 +0,0 @@\n-a');
    expect(unifiedDiff('same\n', 'same\n')).toMatchObject({ unified: '', added_lines: 0, removed_lines: 0 });
  });

  it('is bounded: output cut at maxLines, and a huge middle is shown as removed then added', () => {
    const d = unifiedDiff(
      lines(1000),
      lines(1000, (i) => `changed ${i}`),
      50,
    );
    expect(d.truncated).toBe(true);
    expect(d.unified.split('\n')).toHaveLength(50);
    // Paging: the next page starts where this one stopped, and the last page is not truncated.
    const both = unifiedDiff(
      lines(1000),
      lines(1000, (i) => `changed ${i}`),
      100,
    ).unified.split('\n');
    const next = unifiedDiff(
      lines(1000),
      lines(1000, (i) => `changed ${i}`),
      50,
      50,
    );
    expect(next.unified.split('\n')).toEqual(both.slice(50, 100));
    const last = unifiedDiff(
      lines(1000),
      lines(1000, (i) => `changed ${i}`),
      50,
      d.total_lines - 10,
    );
    expect(last).toMatchObject({ truncated: false, total_lines: d.total_lines });
    expect(last.unified.split('\n')).toHaveLength(10);
    // Every odd line differs: an LCS would keep the even ones, but past MAX_DIFF_CELLS the whole middle
    // (all but the common last line) is shown as removed then added.
    const n = 2 * Math.ceil(Math.sqrt(MAX_DIFF_CELLS) / 2) + 10;
    const big = unifiedDiff(
      lines(n),
      lines(n, (i) => (i % 2 ? `x${i}` : `line ${i}`)),
      10,
    );
    expect(big.removed_lines).toBe(n - 1);
    expect(big.added_lines).toBe(n - 1);
  });
});
