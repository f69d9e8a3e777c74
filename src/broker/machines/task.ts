import { isTerminalTask, TASK_TABLE, type TaskEvent } from '../../domain/machines/task.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { TASKS_TOPIC, taskTopic } from '../topics.js';
import { applyMove } from './apply-move.js';
import { settleGrantRun } from './standing-grant.js';

/** Fields a transition may set besides the state. */
export type TaskChanges = Partial<
  Pick<TaskRecord, 'desired' | 'reason' | 'failure_reason' | 'exit_code' | 'signal' | 'started_at'>
>;

/**
 * Applies a task event with compare-and-set, stamps finished_at on terminal states, appends the audit
 * row and schedules notifications. The only place a task's state is assigned.
 */
export function moveTask(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'notifier'>,
  t: TaskRecord,
  event: TaskEvent,
  actor: string,
  changes: TaskChanges = {},
  data: Record<string, unknown> = {},
): TaskRecord {
  const next = applyMove(deps, {
    kind: 'task',
    table: TASK_TABLE,
    record: t,
    event,
    actor,
    next: (to, now) => ({
      ...t,
      // Leaving the queue drops the wait reason recorded at approval.
      ...(t.state === 'QUEUED' ? { reason: null } : {}),
      ...changes,
      state: to,
      updated_at: now,
      finished_at: isTerminalTask(to) ? now : null,
    }),
    save: (next, expected) => deps.store.tasks.update(next, expected),
    data,
    topics: [taskTopic(t.id), TASKS_TOPIC],
  });
  // A run a standing grant approved is charged and released in the same transaction as its end.
  if (isTerminalTask(next.state)) settleGrantRun(deps, next);
  return next;
}

/** get_task. */
