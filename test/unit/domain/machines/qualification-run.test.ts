import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QualificationRunStateSchema } from '../../../../src/contracts/tools-qualification.js';
import {
  QUALIFICATION_RUN_EVENTS,
  QUALIFICATION_RUN_STATES,
  QUALIFICATION_RUN_TABLE,
  type QualificationRunState,
  transitionQualificationRun,
  verdictEvent,
} from '../../../../src/domain/machines/qualification-run.js';
import { terminalStates } from '../../../../src/domain/machines/state-machine.js';

/** The qualification run machine (docs/state-machines.md): RUNNING leaves exactly once, to the verdict or CANCELLED. */

describe('the qualification run table', () => {
  it('has the states the wire contract and the database name, and only RUNNING moves', () => {
    expect([...QUALIFICATION_RUN_STATES]).toEqual(QualificationRunStateSchema.options);
    expect(Object.keys(QUALIFICATION_RUN_TABLE).sort()).toEqual([...QUALIFICATION_RUN_STATES].sort());
    expect(terminalStates(QUALIFICATION_RUN_TABLE).sort()).toEqual(
      ['CANCELLED', 'FAILED', 'INCONCLUSIVE', 'PASSED'].sort(),
    );
    expect(verdictEvent('PASSED')).toBe('pass');
    expect(verdictEvent('FAILED')).toBe('fail');
    expect(verdictEvent('INCONCLUSIVE')).toBe('inconclusive');
    expect(transitionQualificationRun('RUNNING', verdictEvent('FAILED'))).toMatchObject({
      ok: true,
      to: 'FAILED',
    });
    expect(transitionQualificationRun('PASSED', 'cancel')).toEqual({
      ok: false,
      from: 'PASSED',
      event: 'cancel',
      allowed: [],
    });
  });

  it('property: any sequence of events moves a run at most once, and only out of RUNNING', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...QUALIFICATION_RUN_EVENTS), { maxLength: 20 }), (events) => {
        let state: QualificationRunState = 'RUNNING';
        let moves = 0;
        for (const e of events) {
          const t = transitionQualificationRun(state, e);
          if (t.ok) {
            expect(state).toBe('RUNNING');
            state = t.to;
            moves += 1;
          }
        }
        expect(moves).toBe(events.length === 0 ? 0 : 1);
        if (events.length > 0) expect(state).toBe(QUALIFICATION_RUN_TABLE.RUNNING[events[0]!]);
      }),
    );
  });
});
