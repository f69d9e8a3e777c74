import { describe, expect, it } from 'vitest';
import { LEASE_EVENTS } from '../../../../src/domain/machines/lease.js';
import { PROPOSAL_EVENTS } from '../../../../src/domain/machines/proposal.js';
import { QUALIFICATION_RUN_EVENTS } from '../../../../src/domain/machines/qualification-run.js';
import { TASK_EVENTS } from '../../../../src/domain/machines/task.js';
import { AUDIT_ACTIONS, machineAuditAction } from '../../../../src/domain/retention/audit-action.js';

describe('audit actions', () => {
  it('a move writes `<kind>.<event>`, the strings already on disk', () => {
    expect(machineAuditAction('task', 'started')).toBe('task.started');
    expect(machineAuditAction('qualification_run', 'pass')).toBe('qualification_run.pass');
    expect(machineAuditAction('execution', 'reconcile')).toBe('execution.reconcile');
  });

  it('the other actions are listed once and name no move', () => {
    expect(new Set(AUDIT_ACTIONS).size).toBe(AUDIT_ACTIONS.length);
    const moves = new Set<string>([
      ...TASK_EVENTS.map((e) => machineAuditAction('task', e)),
      ...LEASE_EVENTS.map((e) => machineAuditAction('lease', e)),
      ...PROPOSAL_EVENTS.map((e) => machineAuditAction('proposal', e)),
      ...QUALIFICATION_RUN_EVENTS.map((e) => machineAuditAction('qualification_run', e)),
    ]);
    expect(AUDIT_ACTIONS.filter((a) => moves.has(a))).toEqual([]);
  });
});
