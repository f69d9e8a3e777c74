import { BrokerError } from '../contracts/errors.js';
import type { Principal } from '../store/principals-repo.js';
import type { BrokerDeps } from './deps.js';
import { loadVisibleTask } from './tasks.js';

/** Reading what a task produced: logs by offset or tail, and declared output files. */

function latestExecutionId(deps: BrokerDeps, taskId: string): string | null {
  const lease = deps.store.leases.latestLeaseForTask(taskId);
  return lease ? (deps.store.leases.executionForLease(lease.id)?.id ?? null) : null;
}

/** get_task_logs. */
export function getTaskLogs(
  deps: BrokerDeps,
  principal: Principal,
  q: {
    task_id: string;
    stream?: 'stdout' | 'stderr' | undefined;
    offset?: number | undefined;
    tail_lines?: number | undefined;
    max_bytes?: number | undefined;
  },
) {
  const t = loadVisibleTask(deps, principal, q.task_id);
  const stream = q.stream ?? 'stdout';
  const max = q.max_bytes ?? 65536;
  const complete = ['COMPLETED', 'FAILED', 'CANCELLED'].includes(t.state);
  const execId = latestExecutionId(deps, t.id);
  if (!execId)
    return { task_id: t.id, stream, offset: 0, next_offset: 0, total_bytes: 0, data: '', complete };
  const total = deps.store.logs.total(execId, stream);
  if (q.tail_lines !== undefined) {
    // Read a window from the end that is large enough for the lines asked for, capped by max_bytes.
    const from = Math.max(0, total - max);
    const { data } = deps.store.logs.read(execId, stream, from, max);
    const lines = data.toString('utf8').split('\n');
    if (lines.at(-1) === '') lines.pop();
    const tail = lines.slice(-q.tail_lines).join('\n');
    const text = tail.length > 0 ? `${tail}\n` : '';
    return {
      task_id: t.id,
      stream,
      offset: total - Buffer.byteLength(text),
      next_offset: total,
      total_bytes: total,
      data: text,
      complete,
    };
  }
  const offset = q.offset ?? 0;
  const { data, next } = deps.store.logs.read(execId, stream, offset, max);
  return {
    task_id: t.id,
    stream,
    offset,
    next_offset: next,
    total_bytes: total,
    data: data.toString('utf8'),
    complete,
  };
}

/** get_task_outputs. */
export function getTaskOutputs(
  deps: BrokerDeps,
  principal: Principal,
  q: { task_id: string; path?: string | undefined; max_bytes?: number | undefined },
) {
  const t = loadVisibleTask(deps, principal, q.task_id);
  const execId = latestExecutionId(deps, t.id);
  const outputs = execId ? deps.store.logs.outputs(execId) : [];
  if (q.path === undefined) return { task_id: t.id, outputs, file: null };
  const f = execId ? deps.store.logs.output(execId, q.path) : undefined;
  if (!f)
    throw new BrokerError(
      'NOT_FOUND',
      `task ${t.id} has no output ${q.path}`,
      `Outputs: ${outputs.map((o) => o.path).join(', ') || 'none'}.`,
    );
  const max = q.max_bytes ?? 1048576;
  const slice = f.content.subarray(0, max);
  const text = slice.toString('utf8');
  const isText = !text.includes('\uFFFD') && !slice.includes(0);
  return {
    task_id: t.id,
    outputs,
    file: {
      path: f.path,
      encoding: isText ? ('utf8' as const) : ('base64' as const),
      content: isText ? text : slice.toString('base64'),
      truncated: f.content.length > max,
    },
  };
}
