import { describe, expect, it } from 'vitest';
import { DiffMemo } from '../../../src/broker/diff-memo.js';

const script = (chars: number) => ({
  script: { lines: ['x'.repeat(chars - 1)], added_lines: 1, removed_lines: 0, work: 0 },
});

describe('DiffMemo', () => {
  it('holds at most its bound, dropping the least recently used first', () => {
    const memo = new DiffMemo(100);
    memo.set('a', script(40));
    memo.set('b', script(40));
    expect(memo.get('a')).toBeDefined(); // a is now the most recent
    memo.set('c', script(40));
    expect(memo.get('b')).toBeUndefined();
    expect(memo.get('a')).toBeDefined();
    expect(memo.size()).toEqual({ entries: 2, chars: 80 });
  });

  it('does not keep an entry larger than the whole bound, and replaces one under the same key', () => {
    const memo = new DiffMemo(100);
    memo.set('big', script(101));
    expect(memo.size().entries).toBe(0);
    memo.set('k', script(10));
    memo.set('k', { note: 'binary' });
    expect(memo.get('k')).toEqual({ note: 'binary' });
    expect(memo.size()).toEqual({ entries: 1, chars: 6 });
    expect(DiffMemo.key(null, 'b')).toBe('-:b');
  });
});
