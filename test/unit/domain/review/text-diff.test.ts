import { describe, expect, it } from 'vitest';
import { diffScript, MAX_DIFF_WORK, unifiedDiff } from '../../../../src/domain/review/text-diff.js';

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
    // Every odd line differs: the script keeps the even ones, but past MAX_DIFF_WORK (about D²/2 for D
    // edits) the whole middle (all but the common last line) is shown as removed then added.
    const n = 2 * Math.ceil(Math.sqrt(2 * MAX_DIFF_WORK)) + 10;
    const big = unifiedDiff(
      lines(n),
      lines(n, (i) => (i % 2 ? `x${i}` : `line ${i}`)),
      10,
    );
    expect(big.removed_lines).toBe(n - 1);
    expect(big.added_lines).toBe(n - 1);
  });

  it('finds few edits in a long file cheaply, and refuses when told to', () => {
    const n = 20_000;
    const after = lines(n).replace('line 7\n', 'seven\n').replace('line 19993\n', 'x\n');
    const d = diffScript(lines(n), after);
    expect('lines' in d && d.lines.filter((l) => /^[-+]/.test(l))).toEqual([
      '-line 7',
      '+seven',
      '-line 19993',
      '+x',
    ]);
    expect('work' in d && d.work).toBeLessThan(200_000);
    const odd = lines(200, (i) => (i % 2 ? `x${i}` : `line ${i}`));
    expect(diffScript(lines(200), odd, { work: 1000, over: 'refuse' })).toMatchObject({ refused: {} });
    const small = unifiedDiff(lines(200), odd, 1000);
    expect(small.removed_lines).toBe(100);
    expect(small.added_lines).toBe(100);
  });

  it('agrees with a plain LCS on the number of kept lines (random edits)', () => {
    let seed = 7;
    const rnd = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let round = 0; round < 50; round++) {
      const a = Array.from({ length: 1 + Math.floor(rnd() * 40) }, () => String(Math.floor(rnd() * 5)));
      const b = Array.from({ length: 1 + Math.floor(rnd() * 40) }, () => String(Math.floor(rnd() * 5)));
      const d = unifiedDiff(`${a.join('\n')}\n`, `${b.join('\n')}\n`, 10_000);
      const lcs = lcsLength(a, b);
      expect(a.length - d.removed_lines).toBe(lcs);
      expect(b.length - d.added_lines).toBe(lcs);
    }
  });
});

function lcsLength(a: string[], b: string[]): number {
  const t = Array.from({ length: a.length + 1 }, () => new Array<number>(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--)
    for (let j = b.length - 1; j >= 0; j--)
      t[i]![j] = a[i] === b[j] ? t[i + 1]![j + 1]! + 1 : Math.max(t[i + 1]![j]!, t[i]![j + 1]!);
  return t[0]![0]!;
}
