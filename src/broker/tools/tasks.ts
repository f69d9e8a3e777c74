import { BrokerError } from '../../contracts/errors.js';
import type { TaskView } from '../../contracts/views.js';
import { type TaskState, waitSettles } from '../../domain/task.js';
import type { Principal } from '../../store/principals-repo.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import { canReadAll } from '../principals.js';
import { taskTopic } from '../topics.js';
import { fetchPage } from './paging.js';
import { taskSummary, taskView } from './views.js';
import { waitUntil } from './wait-until.js';

/** Use cases of tasks: read, list, wait (the one function that moves a task's state is machines/task.ts). */

/** Loads a task the principal may see; others' tasks are NOT_FOUND (no existence leak). */
export function loadVisibleTask(deps: BrokerDeps, principal: Principal, id: string): TaskRecord {
  const t = deps.store.tasks.get(id);
  if (!t || (t.owner_id !== principal.id && !canReadAll(principal)))
    throw new BrokerError('NOT_FOUND', `no task ${id}`, 'Check the id; list_tasks shows yours.');
  return t;
}

export function getTask(deps: BrokerDeps, principal: Principal, taskId: string): TaskView {
  return taskView(deps.store, loadVisibleTask(deps, principal, taskId), deps.observe);
}

/** list_tasks. */
export function listTasks(
  deps: BrokerDeps,
  principal: Principal,
  q: { state?: TaskState | undefined; limit?: number | undefined; cursor?: string | undefined },
) {
  const { page, next_cursor } = fetchPage(q.limit, (limit) =>
    deps.store.tasks.list({
      limit,
      ...(canReadAll(principal) ? {} : { owner_id: principal.id }),
      ...(q.state ? { state: q.state } : {}),
      ...(q.cursor ? { before_id: q.cursor } : {}),
    }),
  );
  return { tasks: page.map((t) => taskSummary(deps.store, t, deps.observe)), next_cursor };
}

/**
 * wait_for_task: returns when the task settles or after the timeout. A task parked because its worker
 * fell silent is not settled here (`waitSettles`): it may come back by itself.
 */
export async function waitForTask(
  deps: BrokerDeps,
  principal: Principal,
  taskId: string,
  timeoutSeconds: number,
  signal?: AbortSignal,
): Promise<{ task: TaskView; timed_out: boolean }> {
  const { value, timed_out } = await waitUntil(
    deps,
    taskTopic(taskId),
    timeoutSeconds * 1000,
    () => loadVisibleTask(deps, principal, taskId),
    (t) => waitSettles(t.state, typeof t.reason?.code === 'string' ? t.reason.code : null),
    signal,
  );
  return { task: taskView(deps.store, value, deps.observe), timed_out };
}
