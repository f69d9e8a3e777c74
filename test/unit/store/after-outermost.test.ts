import { afterEach, describe, expect, it } from 'vitest';
import { Store } from '../../../src/store/store.js';

/**
 * Store.afterOutermost (ADR 0027): a record that must outlive a refused call is written in its own
 * transaction once the outermost one ends, whether it committed or rolled back — never inside it.
 */

let store: Store | undefined;
afterEach(() => store?.close());

const append = (s: Store, action: 'review.escalated' | 'principal.created') =>
  s.audit.append({ at: 1, actor: 't', action, subject_type: 'x', subject_id: 'y', data: {} });
const count = (s: Store) => (s.db.prepare('SELECT count(*) AS n FROM audit_events').get() as { n: number }).n;

describe('Store.afterOutermost', () => {
  it('runs after a rollback, in its own transaction, while the failed work stays undone', () => {
    store = Store.open(':memory:');
    const s = store;
    expect(() =>
      s.transaction(() => {
        append(s, 'principal.created');
        s.transaction(() => s.afterOutermost(() => append(s, 'review.escalated')));
        expect(count(s)).toBe(1);
        throw new Error('refused');
      }),
    ).toThrow('refused');
    const rows = s.db.prepare('SELECT action FROM audit_events').all() as Array<{ action: string }>;
    expect(rows.map((r) => r.action)).toEqual(['review.escalated']);
  });

  it('runs after a commit too, and at once outside any transaction', () => {
    store = Store.open(':memory:');
    const s = store;
    s.transaction(() => s.afterOutermost(() => append(s, 'review.escalated')));
    expect(count(s)).toBe(1);
    s.afterOutermost(() => append(s, 'review.escalated'));
    expect(count(s)).toBe(2);
  });
});
