import { cardLabel } from '../../src/contracts/sample.js';
import type { TaskView } from '../../src/contracts/views.js';
import type { PostRecords, RungRecords } from '../verify/verifier.js';

/**
 * How the runner follows what it started (qualification/run/runner.ts): a task's state as one progress
 * line, when a rung's and the run's records have settled, and a bounded re-read until they have.
 */

/** One progress line for a task's current state. */
export function describeTask(t: TaskView): string {
  switch (t.state) {
    case 'QUEUED':
      return `task ${t.task_id} QUEUED: ${String((t.reason as { message?: unknown } | null)?.message ?? t.reason?.['code'] ?? 'waiting')}`;
    case 'ASSIGNED':
    case 'RUNNING':
    case 'FINALIZING':
      return `task ${t.task_id} ${t.state} on ${t.worker_id} cards ${t.cards.map((c) => cardLabel(c.index)).join(',')} (lease_epoch ${t.lease_epoch})`;
    case 'COMPLETED':
      return `task ${t.task_id} COMPLETED (exit ${t.exit_code})`;
    default:
      return `task ${t.task_id} ${t.state}${t.failure_reason ? ` (${t.failure_reason})` : ''}`;
  }
}

/** A rung's records are final: its task ended and its lease (if any) was released or quarantined. */
export function rungSettled(r: RungRecords): boolean {
  if (r.task === null) return true;
  const taskDone = ['COMPLETED', 'FAILED', 'CANCELLED', 'RECONCILIATION_REQUIRED'].includes(r.task.state);
  const leaseDone = r.lease === null || r.lease.state === 'RELEASED' || r.lease.state === 'QUARANTINED';
  return taskDone && leaseDone;
}

/** The post-conditions are final: no live lease and every reserved card back to AVAILABLE. */
export function postSettled(p: PostRecords): boolean {
  // Right after the last cleanup the cards may still show the last sample from before it.
  return p.residual_leases.length === 0 && p.cards.every((c) => c.state === 'AVAILABLE');
}

/** Re-reads `read` until `done` holds or `timeoutMs` passes; returns the last reading either way. */
export async function settle<T>(
  read: () => T,
  done: (v: T) => boolean,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = read();
  while (!done(value) && Date.now() < deadline && !signal.aborted) {
    await new Promise((r) => setTimeout(r, 200));
    value = read();
  }
  return value;
}
