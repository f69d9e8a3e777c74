import { BrokerError } from '../../contracts/errors.js';
import { DEFAULT_RESULT_BYTES } from '../../contracts/tools-tasks.js';
import { isTerminalTask } from '../../domain/machines/task.js';
import type { LogsRepo } from '../../store/logs-repo.js';
import type { Principal } from '../../store/principals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { loadVisibleTask } from './tasks.js';
import { iso } from './views.js';

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
  const max = q.max_bytes ?? DEFAULT_RESULT_BYTES;
  const complete = isTerminalTask(t.state);
  const execId = latestExecutionId(deps, t.id);
  const logs_pruned_at = iso(deps.store.logs.prunedAt(t.id).logs_pruned_at);
  if (!execId)
    return page({
      complete,
      log_capped: false,
      offset: 0,
      next_offset: 0,
      total_bytes: 0,
      task_id: t.id,
      stream,
      data: '',
      logs_pruned_at,
    });
  const total = deps.store.logs.total(execId, stream);
  // The task's log reached the master's cap (storage.max_log_bytes_per_task); the rest was dropped.
  const log_capped =
    total + deps.store.logs.total(execId, stream === 'stdout' ? 'stderr' : 'stdout') >=
    deps.config.storage.max_log_bytes_per_task;
  if (q.tail_lines !== undefined) {
    // Read a window from the end that is large enough for the lines asked for, capped by max_bytes.
    const from = Math.max(0, total - max);
    const { data } = deps.store.logs.read(execId, stream, from, max);
    // A window that starts inside a character drops its tail bytes, so `offset` below counts real bytes.
    const lines = data
      .subarray(from > 0 ? leadingContinuationBytes(data) : 0)
      .toString('utf8')
      .split('\n');
    if (lines.at(-1) === '') lines.pop();
    const tail = lines.slice(-q.tail_lines).join('\n');
    const text = tail.length > 0 ? `${tail}\n` : '';
    return page({
      complete,
      log_capped,
      offset: total - Buffer.byteLength(text),
      next_offset: total,
      total_bytes: total,
      task_id: t.id,
      stream,
      data: text,
      logs_pruned_at,
    });
  }
  const { data, offset, next } = readLogPage(deps.store.logs, execId, stream, q.offset ?? 0, max);
  return page({
    complete,
    log_capped,
    offset,
    next_offset: next,
    total_bytes: total,
    task_id: t.id,
    stream,
    data: data.toString('utf8'),
    logs_pruned_at,
  });
}

/** A log page with its paging fields first; `truncated`: bytes of the stream lie outside it. */
function page<T extends { complete: boolean; offset: number; next_offset: number; total_bytes: number }>(
  p: T,
) {
  const { complete, ...rest } = p;
  return { complete, truncated: p.offset > 0 || p.next_offset < p.total_bytes, ...rest };
}

/** get_task_outputs. */
export function getTaskOutputs(
  deps: BrokerDeps,
  principal: Principal,
  q: {
    task_id: string;
    path?: string | undefined;
    offset?: number | undefined;
    max_bytes?: number | undefined;
  },
) {
  const t = loadVisibleTask(deps, principal, q.task_id);
  const execId = latestExecutionId(deps, t.id);
  const outputs = execId ? deps.store.logs.outputs(execId) : [];
  const prunedAt = deps.store.logs.prunedAt(t.id).outputs_pruned_at;
  const outputs_pruned_at = iso(prunedAt);
  if (q.path === undefined) return { task_id: t.id, file: null, outputs, outputs_pruned_at };
  const f = execId ? deps.store.logs.output(execId, q.path) : undefined;
  if (f && prunedAt !== null)
    throw new BrokerError(
      'NOT_FOUND',
      `the content of output ${q.path} of task ${t.id} was deleted by retention at ${outputs_pruned_at}`,
      'The listing keeps its size and sha256; the master keeps output files storage.retention.outputs_days days after a task ends.',
      { reason: 'pruned_by_retention', pruned_at: outputs_pruned_at },
    );
  if (!f)
    throw new BrokerError(
      'NOT_FOUND',
      `task ${t.id} has no output ${q.path}`,
      `Outputs: ${outputs.map((o) => o.path).join(', ') || 'none'}.`,
    );
  const max = q.max_bytes ?? DEFAULT_RESULT_BYTES;
  const offset = Math.min(q.offset ?? 0, f.content.length);
  let end = Math.min(f.content.length, offset + max);
  // A page of text ends on a character boundary, so splitting a file does not make it look binary.
  const back = end < f.content.length ? partialCharBytes(f.content.subarray(offset, end)) : 0;
  if (back < end - offset) end -= back;
  const slice = f.content.subarray(offset, end);
  const text = slice.toString('utf8');
  const isText = !text.includes('\uFFFD') && !slice.includes(0);
  return {
    task_id: t.id,
    file: {
      truncated: offset > 0 || end < f.content.length,
      offset,
      next_offset: end,
      size: f.content.length,
      path: f.path,
      encoding: isText ? ('utf8' as const) : ('base64' as const),
      content: isText ? text : slice.toString('base64'),
    },
    outputs,
    outputs_pruned_at,
  };
}

/**
 * A page of a log stream that splits no UTF-8 character, as output pages do: it starts at `from`, or past
 * the rest of a character `from` falls inside, and ends at the last character boundary within `max` bytes
 * (past the first character when that one alone is longer than `max`: at most 3 bytes over). `offset` and
 * `next` are the store's own positions, so paging on with `next` loses and repeats nothing.
 */
export function readLogPage(
  logs: Pick<LogsRepo, 'read'>,
  executionId: string,
  stream: 'stdout' | 'stderr',
  from: number,
  max: number,
): { data: Buffer; offset: number; next: number } {
  // Up to 3 bytes may be skipped at the start and up to 3 looked at past the end.
  const { data: window } = logs.read(executionId, stream, from, max + 6);
  const start = from > 0 ? leadingContinuationBytes(window) : 0;
  const end = charBoundaryNear(window, start, Math.min(window.length, start + max));
  // Positions in the store are not bytes of `window` where chunks overlap or leave gaps (binary output),
  // so the exact offsets come from the store's own reads.
  const offset = start === 0 ? from : logs.read(executionId, stream, from, start).next;
  const { data, next } = logs.read(executionId, stream, offset, end - start);
  return { data, offset, next };
}

const isContinuation = (b: number | undefined) => b !== undefined && (b & 0xc0) === 0x80;

/** How many bytes at the start of `buf` continue a character begun before it (0 to 3). */
function leadingContinuationBytes(buf: Buffer): number {
  let n = 0;
  while (n < 3 && isContinuation(buf[n])) n++;
  return n;
}

/**
 * The character boundary at `end` in `buf`, else the one before it when that leaves the page (from `start`)
 * non-empty, else the one after. The end of `buf` counts as a boundary: the stream holds nothing more yet.
 */
function charBoundaryNear(buf: Buffer, start: number, end: number): number {
  if (!isContinuation(buf[end])) return end;
  let back = end;
  while (back > start && isContinuation(buf[back])) back--;
  if (back > start) return back;
  let ahead = end;
  while (ahead < buf.length && isContinuation(buf[ahead])) ahead++;
  return ahead;
}

/** How many bytes at the end of `buf` are an incomplete UTF-8 sequence (0 to 3). */
function partialCharBytes(buf: Buffer): number {
  for (let i = 1; i <= Math.min(3, buf.length); i++) {
    const b = buf[buf.length - i]!;
    if ((b & 0xc0) === 0x80) continue; // continuation byte: keep looking for the lead
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > i ? i : 0;
  }
  return 0;
}
