import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  EXECUTION_TABLE,
  type ExecutionPhase,
  executionStep,
  moveExecutionPhase,
  type ReportedPhase,
  receiptDeadline,
  transitionExecution,
} from '../../../../src/domain/machines/execution.js';
import { packageRoot } from '../../../../src/platform/package-root.js';

const PHASES = Object.keys(EXECUTION_TABLE) as ExecutionPhase[];
const REPORTED = PHASES.filter((p): p is ReportedPhase => p !== 'assigned');

/** The execution table as docs/state-machines.md shows it. */
function renderTable(): string {
  const head = `| from \\ report | ${REPORTED.map((r) => `\`${r}\``).join(' | ')} |`;
  const rule = `| --- | ${REPORTED.map(() => '---').join(' | ')} |`;
  const rows = PHASES.map((from) => {
    const cells = REPORTED.map((r) => {
      const step = executionStep(from, r);
      return step.kind === 'apply' ? step.to : step.kind === 'duplicate' ? 'dup' : '✗';
    });
    return `| \`${from}\` | ${cells.join(' | ')} |`;
  });
  return [head, rule, ...rows].join('\n');
}

describe('the execution table', () => {
  it('allows exactly the honest paths', () => {
    const apply = (from: ExecutionPhase, r: ReportedPhase) => executionStep(from, r).kind;
    expect(apply('assigned', 'accepted')).toBe('apply');
    expect(apply('assigned', 'rejected')).toBe('apply');
    expect(apply('accepted', 'exited')).toBe('apply'); // could not spawn: no `started`
    expect(apply('exited', 'cleanup_failed')).toBe('apply');
    expect(apply('cleanup_failed', 'cleaned')).toBe('apply'); // a late receipt
    // docs/state-machines.md: a jump to the end, and a refusal after starting.
    expect(apply('assigned', 'cleaned')).toBe('illegal');
    expect(apply('started', 'rejected')).toBe('illegal');
    expect(apply('accepted', 'cleaned')).toBe('illegal');
    expect(apply('rejected', 'started')).toBe('illegal');
    // Resent reports.
    expect(apply('started', 'accepted')).toBe('duplicate');
    expect(apply('cleaned', 'exited')).toBe('duplicate');
    expect(apply('rejected', 'rejected')).toBe('duplicate');
  });

  it('property: applying any sequence of reports only ever follows the table, and ends nowhere else', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...REPORTED), { maxLength: 30 }), (reports) => {
        let phase: ExecutionPhase = 'assigned';
        const path: ExecutionPhase[] = [phase];
        for (const r of reports) {
          const step = executionStep(phase, r);
          if (step.kind === 'apply') {
            expect(EXECUTION_TABLE[phase][r]).toBe(step.to);
            phase = step.to;
            path.push(phase);
          }
        }
        // Every path reaching cleaned went through exited; rejected is reached only from assigned.
        if (phase === 'cleaned') expect(path).toContain('exited');
        if (phase === 'rejected') expect(path).toEqual(['assigned', 'rejected']);
      }),
    );
  });

  it('reconcile (master only) gives up any live execution, never a finished one, and no worker can report it', () => {
    for (const from of PHASES) {
      const t = transitionExecution(from, 'reconcile');
      const live = !['rejected', 'cleaned', 'cleanup_failed'].includes(from);
      expect(t, from).toMatchObject(live ? { ok: true, to: 'cleanup_failed' } : { ok: false });
    }
    // The refusals a worker sees (and its own local moves) name only phases it could send.
    for (const from of PHASES)
      for (const r of REPORTED) {
        const step = executionStep(from, r);
        if (step.kind === 'illegal') expect(step.allowed).not.toContain('reconcile');
        const local = moveExecutionPhase(from, r);
        if (!local.ok) expect(local.allowed).not.toContain('reconcile');
      }
  });

  it('is shown in docs/state-machines.md as the code has it', () => {
    const doc = readFileSync(join(packageRoot(), 'docs', 'state-machines.md'), 'utf8');
    expect(doc).toContain(renderTable());
  });
});

describe('receiptDeadline (docs/operations.md "Partitions")', () => {
  const window_ms = 60_000;

  it('never falls due while the worker is unreachable', () => {
    fc.assert(
      fc.property(fc.nat(), fc.option(fc.nat()), (exited_at, refused_at) => {
        expect(receiptDeadline({ exited_at, refused_at, reachable_since: null, window_ms })).toBeNull();
      }),
    );
  });

  it('runs the whole window from the latest of the exit, the reconnection and the last refusal', () => {
    fc.assert(
      fc.property(fc.nat(), fc.option(fc.nat()), fc.nat(), (exited_at, refused_at, reachable_since) => {
        const due = receiptDeadline({ exited_at, refused_at, reachable_since, window_ms })!;
        expect(due - window_ms).toBe(Math.max(exited_at, refused_at ?? 0, reachable_since));
      }),
    );
  });

  it('a worker partitioned right after the exit, back 90 s later, gets the full window again', () => {
    expect(receiptDeadline({ exited_at: 1_000, refused_at: null, reachable_since: 91_000, window_ms })).toBe(
      151_000,
    );
  });
});
