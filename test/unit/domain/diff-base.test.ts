import { describe, expect, it } from 'vitest';
import { chooseDiffBase } from '../../../src/domain/diff-base.js';

/** The reviewer's diff base (issue 20, item 5): the latest earlier revision a reviewer decided on. */

const rev = (number: number, confirmed = true) => ({
  revision_id: `rev_${number}`,
  number,
  digest: `d${number}`,
  confirmed,
});

describe('chooseDiffBase', () => {
  it('is nothing for revision 1, and nothing while no earlier revision was decided on', () => {
    expect(chooseDiffBase(1, [rev(1)], [])).toEqual({ base: null, unreviewed_between: [] });
    expect(chooseDiffBase(3, [rev(3), rev(1, false), rev(2)], [])).toEqual({
      base: null,
      unreviewed_between: [rev(1, false), rev(2)],
    });
  });

  it('skips revisions nobody decided on and lists them, oldest first', () => {
    const decisions = [{ revision_id: 'rev_1', decision: 'REQUEST_CHANGES' as const, at: 10 }];
    expect(chooseDiffBase(4, [rev(1), rev(2, false), rev(3, false), rev(4)], decisions)).toEqual({
      base: { revision_id: 'rev_1', number: 1, digest: 'd1', decision: 'REQUEST_CHANGES' },
      unreviewed_between: [rev(2, false), rev(3, false)],
    });
  });

  it('takes the latest decided revision before the one shown, never the shown one or a later one', () => {
    const decisions = [
      { revision_id: 'rev_1', decision: 'REQUEST_CHANGES' as const, at: 10 },
      { revision_id: 'rev_2', decision: 'REQUEST_CHANGES' as const, at: 20 },
      { revision_id: 'rev_3', decision: 'APPROVE' as const, at: 30 },
    ];
    const all = [rev(1), rev(2), rev(3)];
    expect(chooseDiffBase(3, all, decisions).base?.revision_id).toBe('rev_2');
    expect(chooseDiffBase(2, all, decisions)).toEqual({
      base: { revision_id: 'rev_1', number: 1, digest: 'd1', decision: 'REQUEST_CHANGES' },
      unreviewed_between: [],
    });
  });

  it('names the latest decision on the base revision', () => {
    const decisions = [
      { revision_id: 'rev_1', decision: 'REJECT' as const, at: 20 },
      { revision_id: 'rev_1', decision: 'REQUEST_CHANGES' as const, at: 10 },
    ];
    expect(chooseDiffBase(2, [rev(1), rev(2)], decisions).base?.decision).toBe('REJECT');
  });
});
