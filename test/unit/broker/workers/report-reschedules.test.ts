import { describe, expect, it } from 'vitest';
import { reschedules } from '../../../../src/broker/workers/reports.js';
import type { ReportReaction } from '../../../../src/domain/machines/execution-report.js';

// Which reports request a scheduling pass (docs/performance.md "Noisy neighbours"): only those whose moves change what a pass reads.

const execution: ReportReaction = { kind: 'move_execution', phase: 'started', changes: {} };
const task = (event: string): ReportReaction =>
  ({ kind: 'move_task', event, changes: {}, data: {} }) as unknown as ReportReaction;
const lease = (event: string): ReportReaction =>
  ({ kind: 'move_lease', event, reason: null }) as unknown as ReportReaction;

describe('reschedules', () => {
  it.each<[string, ReportReaction[], boolean]>([
    ['accepted: the execution only', [execution], false],
    ['started: task ASSIGNED → RUNNING', [task('started'), execution], false],
    [
      'exited: task → FINALIZING, lease ACTIVE → RELEASING',
      [task('exited'), lease('execution_ended'), execution],
      false,
    ],
    [
      'a late report the task machine ignores',
      [{ kind: 'task_unmoved', event: 'started', state: 'RUNNING' }],
      false,
    ],
    ['cleaned: the lease frees its cards', [lease('cleaned'), task('cleaned'), execution], true],
    [
      'cleanup_failed: the lease is quarantined',
      [lease('quarantine'), task('cleanup_failed'), execution],
      true,
    ],
    ['rejected: the task ends', [task('worker_rejected'), execution], true],
    ['an illegal report: marked lost', [{ kind: 'mark_lost', reason: 'x', reported: 'started' }], true],
    ['held cards released', [{ kind: 'release_held', cards: [0] }], true],
    ['a Slurm job recorded', [{ kind: 'record_slurm', slurm: {} } as unknown as ReportReaction], true],
  ])('%s → %s', (_name, reactions, expected) => {
    expect(reschedules(reactions)).toBe(expected);
  });
});
