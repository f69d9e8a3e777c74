import { describe, expect, it } from 'vitest';
import {
  admitRead,
  compareLimit,
  DEFAULT_DIFF_BUDGET,
  type DiffBudget,
  fullBudget,
  notDiffedNote,
  workSpent,
} from '../../../../src/domain/review/diff-budget.js';

const budget: DiffBudget = { file_bytes: 100, file_work: 1000, call_bytes: 250, call_work: 2500 };

describe('the diff budget (ADR 0031)', () => {
  it('refuses a file over the per-file size before reading, naming its size and the limit', () => {
    const why = admitRead(10, 101, fullBudget(budget), budget);
    expect(why).toEqual({ reason: 'file_too_large', unit: 'bytes', size: 101, budget: 100 });
    expect(notDiffedNote(why!)).toBe(
      'not diffed: too large (101 bytes, budget 100 bytes per file); read it with get_input',
    );
  });

  it('admits reads while the call has bytes left, then says the answer’s budget is spent', () => {
    const left = fullBudget(budget);
    expect(admitRead(100, 100, left, budget)).toBeNull();
    left.bytes -= 200;
    const why = admitRead(30, 30, left, budget);
    expect(why).toEqual({ reason: 'call_budget_spent', unit: 'bytes', size: 60, budget: 50 });
    expect(notDiffedNote(why!)).toMatch(
      /^not diffed: too large for this answer \(60 bytes to read, budget 50 bytes left\); page it with diff_path/,
    );
  });

  it('compares a file up to the per-file work (then whole), and up to what is left of the call (then refused)', () => {
    const left = fullBudget(budget);
    expect(compareLimit(left, budget)).toEqual({ work: 1000, over: 'whole' });
    left.work = 400;
    expect(compareLimit(left, budget)).toEqual({ work: 400, over: 'refuse' });
    expect(notDiffedNote(workSpent(401, left))).toMatch(
      /over 401 line comparisons, budget 400 comparisons left/,
    );
    left.work = 0;
    expect(admitRead(1, 1, left, budget)).toMatchObject({ reason: 'call_budget_spent', budget: 0 });
  });

  it('keeps one file’s work within the whole call’s', () => {
    expect(DEFAULT_DIFF_BUDGET.file_work).toBeLessThanOrEqual(DEFAULT_DIFF_BUDGET.call_work);
    expect(2 * DEFAULT_DIFF_BUDGET.file_bytes).toBeLessThanOrEqual(DEFAULT_DIFF_BUDGET.call_bytes);
  });
});
