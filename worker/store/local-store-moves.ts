import type { ErrorCode } from '../../src/contracts/errors.js';
import {
  type ExecutionPhase,
  moveExecutionPhase,
  type ReportedPhase,
} from '../../src/domain/machines/execution.js';

/**
 * How the worker's local execution record may move (ADR 0014): by the master's EXECUTION_TABLE
 * (src/domain/machines/execution.ts), never by assignment. The store (local-store.ts) calls `moveRecordedPhase`
 * inside the transaction that then writes the new phase with compare-and-set.
 */

/** Why a local move was refused; nothing was written. Codes are the broker's error vocabulary. */
export class ExecutionMoveError extends Error {
  constructor(
    /** INVALID_STATE: the table has no such move; CONFLICT: the record is not at `from`; NOT_FOUND. */
    readonly code: Extract<ErrorCode, 'INVALID_STATE' | 'CONFLICT' | 'NOT_FOUND'>,
    readonly executionId: string,
    readonly from: ExecutionPhase,
    readonly to: ReportedPhase,
    /** The phase actually stored, when it differs from `from` (null: no record). */
    readonly stored: ReportedPhase | null = null,
    /** The phases the table allows from `from`. */
    readonly allowed: readonly ReportedPhase[] = [],
  ) {
    super(describe(code, executionId, from, to, stored, allowed));
    this.name = 'ExecutionMoveError';
  }
}

function describe(
  code: ExecutionMoveError['code'],
  id: string,
  from: ExecutionPhase,
  to: ReportedPhase,
  stored: ReportedPhase | null,
  allowed: readonly ReportedPhase[],
): string {
  switch (code) {
    case 'INVALID_STATE':
      return `execution ${id}: ${from} → ${to} is not a move of the execution table (from ${from}: ${allowed.join(', ') || 'nothing, it is final'})`;
    case 'CONFLICT':
      return `execution ${id}: expected it ${from === 'assigned' ? 'unrecorded' : `at ${from}`}, but it is ${stored ?? 'recorded'}; ${to} not written`;
    case 'NOT_FOUND':
      return `execution ${id} is not recorded on this worker; ${to} not written`;
  }
}

/**
 * Checks one move against the table and against what is stored (`stored`: the record's phase, null when
 * there is none); throws ExecutionMoveError, returns nothing when the move may be written. A first
 * record is the move from `assigned` and requires that nothing is stored yet.
 */
export function moveRecordedPhase(
  executionId: string,
  from: ExecutionPhase,
  to: ReportedPhase,
  stored: ReportedPhase | null,
): void {
  const t = moveExecutionPhase(from, to);
  if (!t.ok) throw new ExecutionMoveError('INVALID_STATE', executionId, from, to, stored, t.allowed);
  if (from === 'assigned') {
    if (stored !== null) throw new ExecutionMoveError('CONFLICT', executionId, from, to, stored);
    return;
  }
  if (stored === null) throw new ExecutionMoveError('NOT_FOUND', executionId, from, to);
  if (stored !== from) throw new ExecutionMoveError('CONFLICT', executionId, from, to, stored);
}
