import { describe, expect, it } from 'vitest';
import {
  LEASE_EVENTS,
  LEASE_STATES,
  LEASE_TABLE,
  leaseAccepts,
  leaseHoldsCards,
} from '../../../../src/domain/machines/lease.js';
import {
  isSettledTask,
  isTerminalTask,
  TASK_EVENTS,
  TASK_STATES,
  TASK_TABLE,
  TERMINAL_TASK_STATES,
  taskAccepts,
} from '../../../../src/domain/machines/task.js';

/**
 * The state predicates the broker uses instead of literal lists of states (ADR 0020) agree with
 * the transition tables they are derived from, edge by edge.
 */

/** The events that leave `state` in `table`. */
function outgoing(
  table: Readonly<Record<string, Readonly<Record<string, string | undefined>>>>,
  state: string,
) {
  return Object.entries(table[state] ?? {}).filter(([, to]) => to !== undefined);
}

describe('task predicates', () => {
  it.each(TASK_STATES)('%s: terminal ⇔ no outgoing edge', (s) => {
    expect(isTerminalTask(s)).toBe(outgoing(TASK_TABLE, s).length === 0);
  });

  it('TERMINAL_TASK_STATES lists exactly the terminal states, COMPLETED, FAILED and CANCELLED', () => {
    expect(TERMINAL_TASK_STATES).toEqual(TASK_STATES.filter((s) => outgoing(TASK_TABLE, s).length === 0));
    expect(TERMINAL_TASK_STATES).toEqual(['COMPLETED', 'FAILED', 'CANCELLED']);
  });

  it.each(TASK_STATES)('%s: taskAccepts ⇔ the table has the edge', (s) => {
    for (const e of TASK_EVENTS) expect(taskAccepts(s, e)).toBe(TASK_TABLE[s][e] !== undefined);
  });

  it.each(TASK_STATES)('%s: settled ⇔ terminal or an operator reconcile leaves it', (s) => {
    const reconcilable = outgoing(TASK_TABLE, s).some(([e]) => e.startsWith('reconcile_'));
    expect(isSettledTask(s)).toBe(isTerminalTask(s) || reconcilable);
  });

  it('the settled states are the terminal ones and RECONCILIATION_REQUIRED', () => {
    expect(new Set(TASK_STATES.filter(isSettledTask))).toEqual(
      new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'RECONCILIATION_REQUIRED']),
    );
  });
});

describe('lease predicates', () => {
  it.each(LEASE_STATES)('%s: holds cards ⇔ has an outgoing edge', (s) => {
    expect(leaseHoldsCards(s)).toBe(outgoing(LEASE_TABLE, s).length > 0);
  });

  it('only RELEASED frees the cards', () => {
    expect(LEASE_STATES.filter((s) => !leaseHoldsCards(s))).toEqual(['RELEASED']);
  });

  it.each(LEASE_STATES)('%s: leaseAccepts ⇔ the table has the edge', (s) => {
    for (const e of LEASE_EVENTS) expect(leaseAccepts(s, e)).toBe(LEASE_TABLE[s][e] !== undefined);
  });
});
