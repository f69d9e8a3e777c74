import { createHash } from 'node:crypto';
import type { z } from 'zod';
import { BrokerError } from '../../contracts/errors.js';
import type {
  ExecutionMessageSchema,
  LogMessageSchema,
  OutputMessageSchema,
} from '../../contracts/worker-protocol.js';
import { executionStep } from '../../domain/execution.js';
import { cleanedEvent, exitFailure, type TaskEvent } from '../../domain/task.js';
import type { ExecutionRecord } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';
import { markExecutionLost, moveExecution } from '../machines/execution.js';
import { moveLease } from '../machines/lease.js';
import { moveTask } from '../machines/task.js';
import { taskTopic } from '../topics.js';

/**
 * What the master does with a worker's reports about an execution (DESIGN §§6, 8, 9). Every report is
 * fenced: it must come from the execution's worker and carry the execution's lease_epoch. Reports are
 * idempotent: a phase the execution already passed is acknowledged and ignored.
 */

type ExecutionMessage = z.infer<typeof ExecutionMessageSchema>;
type LogMessage = z.infer<typeof LogMessageSchema>;
type OutputMessage = z.infer<typeof OutputMessageSchema>;

function fenced(deps: BrokerDeps, workerId: string, executionId: string, epoch: number): ExecutionRecord {
  const e = deps.store.leases.execution(executionId);
  if (!e || e.worker_id !== workerId)
    throw new BrokerError(
      'NOT_FOUND',
      `no execution ${executionId} on worker ${workerId}`,
      'The master has no record of it.',
    );
  if (e.lease_epoch !== epoch)
    throw new BrokerError(
      'STALE_EPOCH',
      `execution ${executionId} has lease_epoch ${e.lease_epoch}, report says ${epoch}`,
      'Stale report ignored.',
    );
  return e;
}

/** Moves the task if its table allows the event from where it is; a terminal task is left alone. */
function tryMoveTask(
  deps: BrokerDeps,
  taskId: string,
  event: TaskEvent,
  changes: Parameters<typeof moveTask>[4] = {},
  data = {},
) {
  const t = deps.store.tasks.get(taskId);
  if (!t) return;
  try {
    moveTask(deps, t, event, 'worker', changes, data);
  } catch (err) {
    if (err instanceof BrokerError && err.code === 'INVALID_STATE') {
      deps.logger.info(
        { task_id: taskId, state: t.state, event },
        'late worker report ignored by task state machine',
      );
      return;
    }
    throw err;
  }
}

/**
 * Handles an `execution` report. Call inside a transaction. The execution table (src/domain/execution.ts)
 * decides: a legal next phase is applied, a duplicate is ignored, and an illegal one is refused — the
 * returned error goes back to the worker — after moving the task to RECONCILIATION_REQUIRED and
 * quarantining its lease, in this same transaction: the worker and the master disagree about the
 * execution, so neither its outcome nor its cards can be trusted until an operator reconciles.
 */
export function handleExecutionReport(
  deps: BrokerDeps,
  workerId: string,
  msg: ExecutionMessage,
): BrokerError | null {
  const e = fenced(deps, workerId, msg.execution_id, msg.lease_epoch);
  // A report about one execution that names another task is refused before anything reads it
  // (issue 10, row 9): the master never applies a report to a task it does not name. Unlike an illegal
  // phase (below), nothing is known to have happened to the execution, so nothing changes.
  if (msg.task_id !== e.task_id)
    throw new BrokerError(
      'INVALID_INPUT',
      `execution ${e.id} belongs to task ${e.task_id}, but the report names task ${msg.task_id}`,
      'Report refused; nothing changed. A report must name the task of its execution.',
    );
  // The Slurm job behind it (job id, pending reason, binding) is recorded whatever the phase step says:
  // a repeated `accepted` carries a changed pending reason. A binding once known is never dropped.
  if (msg.slurm !== undefined) {
    const before = deps.store.leases.executionSlurm(e.id);
    const binding = msg.slurm.binding ?? before?.binding ?? null;
    deps.store.leases.setExecutionSlurm(e.id, { ...msg.slurm, binding });
    if (binding !== null && before?.binding == null)
      deps.store.audit.append({
        at: deps.clock.now(),
        actor: workerId,
        action: 'execution.slurm_bound',
        subject_type: 'task',
        subject_id: e.task_id,
        data: { execution_id: e.id, job_id: msg.slurm.job_id, binding },
      });
    deps.store.afterCommit(() => deps.notifier.notify(taskTopic(e.task_id)));
  }
  if (msg.phase === 'cleaned' && e.phase === 'cleanup_failed') {
    lateCleanupReceipt(deps, e, msg.detail);
    return null;
  }
  const step = executionStep(e.phase, msg.phase);
  if (step.kind === 'duplicate') return null;
  if (step.kind === 'illegal') return illegalReport(deps, e, msg.phase, step.allowed);
  const now = deps.clock.now();
  const next: ExecutionRecord = { ...e, phase: msg.phase, updated_at: now };
  const task = deps.store.tasks.get(e.task_id)!;
  const lease = deps.store.leases.lease(e.lease_id)!;
  switch (msg.phase) {
    case 'accepted':
      break;
    case 'started':
      tryMoveTask(deps, e.task_id, 'started', { started_at: now });
      break;
    case 'rejected': {
      next.failure_reason = msg.failure_reason ?? 'SETUP_FAILED';
      next.detail = msg.detail ?? null;
      tryMoveTask(
        deps,
        e.task_id,
        'worker_rejected',
        { failure_reason: next.failure_reason },
        { detail: msg.detail },
      );
      // Nothing ran: the worker refused before any side effect, so the cards are as clean as before.
      if (lease.state !== 'RELEASED')
        moveLease(deps, lease, 'cleaned', 'worker', `rejected: ${next.failure_reason}`);
      break;
    }
    case 'exited': {
      const outputs = msg.outputs ?? [];
      const stored = new Map(deps.store.logs.outputs(e.id).map((o) => [o.path, o]));
      const missing = task.spec.outputs.filter((o) => o.required && !stored.has(o.path)).map((o) => o.path);
      const mismatched = outputs.filter((o) => stored.get(o.path)?.sha256 !== o.sha256).map((o) => o.path);
      let failure = exitFailure({
        exit_code: msg.exit_code ?? null,
        signal: msg.signal ?? null,
        failure_reason: msg.failure_reason ?? null,
      });
      if (!failure && (missing.length > 0 || mismatched.length > 0)) failure = 'OUTPUT_MISSING';
      Object.assign(next, {
        exit_code: msg.exit_code ?? null,
        signal: msg.signal ?? null,
        failure_reason: failure,
        // The master's own record of each output (its size counted from the bytes it stored), never
        // the report's claim.
        outputs: outputs.flatMap((o) => {
          const kept = stored.get(o.path);
          return kept && kept.sha256 === o.sha256 ? [kept] : [];
        }),
        detail: msg.detail ?? (missing.length ? `missing required outputs: ${missing.join(', ')}` : null),
      });
      tryMoveTask(
        deps,
        e.task_id,
        'exited',
        { exit_code: next.exit_code, signal: next.signal, failure_reason: failure },
        { failure_reason: failure },
      );
      if (lease.state === 'ACTIVE') moveLease(deps, lease, 'execution_ended', 'worker');
      break;
    }
    case 'cleaned': {
      if (lease.state !== 'RELEASED') moveLease(deps, lease, 'cleaned', 'worker', 'cleanup receipt');
      const t = deps.store.tasks.get(e.task_id)!;
      const failure = t.failure_reason ?? e.failure_reason;
      tryMoveTask(deps, e.task_id, cleanedEvent(failure, t.desired));
      break;
    }
    case 'cleanup_failed': {
      next.detail = msg.detail ?? 'cleanup not confirmed';
      if (lease.state === 'ACTIVE' || lease.state === 'RELEASING')
        moveLease(deps, lease, 'quarantine', 'worker', next.detail);
      tryMoveTask(
        deps,
        e.task_id,
        'cleanup_failed',
        { failure_reason: 'CLEANUP_UNCONFIRMED' },
        { detail: next.detail },
      );
      break;
    }
  }
  const { exit_code, signal, failure_reason, outputs, detail } = next;
  moveExecution(deps, e, msg.phase, 'worker', { exit_code, signal, failure_reason, outputs, detail });
  if (next.phase === 'cleaned' || next.phase === 'rejected') {
    const indexes = lease.cards.map((c) => c.index);
    deps.store.afterCommit(() => deps.cluster.fleet.releaseHeld(e.worker_id, indexes));
  }
  deps.store.afterCommit(() => deps.notifier.notify(taskTopic(e.task_id)));
  return null;
}

/** An illegal report (see handleExecutionReport): reconcile, audit, and the refusal for the worker. */
function illegalReport(
  deps: BrokerDeps,
  e: ExecutionRecord,
  reported: ExecutionMessage['phase'],
  allowed: readonly string[],
): BrokerError {
  const why = `execution ${e.id} is ${e.phase}; a report of ${reported} cannot follow (expected ${allowed.join(' or ') || 'nothing more'})`;
  deps.logger.warn(
    { execution_id: e.id, task_id: e.task_id, phase: e.phase, reported },
    'illegal execution report',
  );
  markExecutionLost(deps, e, 'master', `illegal execution report: ${why}`, { reported, phase: e.phase });
  deps.store.afterCommit(() => deps.notifier.notify(taskTopic(e.task_id)));
  return new BrokerError(
    'INVALID_STATE',
    why,
    'The master moved the task to RECONCILIATION_REQUIRED; an operator reconciles it (gpu-broker reconcile).',
  );
}

/**
 * A cleanup receipt after the master stopped waiting for it (the sweeper quarantined the lease and
 * failed the task CLEANUP_UNCONFIRMED): the cards are proven clean, so the quarantined lease is
 * released (DESIGN §6). The task keeps its terminal state. A lease an operator already released by
 * reconcile is left as it is.
 */
function lateCleanupReceipt(deps: BrokerDeps, e: ExecutionRecord, detail: string | undefined): void {
  const lease = deps.store.leases.lease(e.lease_id)!;
  if (lease.state !== 'QUARANTINED') return;
  moveLease(deps, lease, 'cleaned', 'worker', 'late cleanup receipt');
  moveExecution(deps, e, 'cleaned', 'worker', { detail: detail ?? 'late cleanup receipt' });
  deps.store.afterCommit(() => deps.notifier.notify(taskTopic(e.task_id)));
}

/**
 * Stores a log chunk at its byte offset. Call inside a transaction. A chunk must start within what the
 * master already holds of its stream (issue 10, row 9): a gap, or a jump to 2^53, is refused, so
 * `total_bytes` never counts bytes that were not stored. Offsets count the task's raw bytes and `data`
 * is their UTF-8 decoding, which is never shorter (an invalid byte becomes a 3-byte U+FFFD), so a
 * worker's next offset is never beyond the stored total; a resent chunk starts below it.
 */
export function handleLogChunk(deps: BrokerDeps, workerId: string, msg: LogMessage): void {
  const e = deps.store.leases.execution(msg.execution_id);
  if (!e || e.worker_id !== workerId)
    throw new BrokerError(
      'NOT_FOUND',
      `no execution ${msg.execution_id} on worker ${workerId}`,
      'Log dropped.',
    );
  const data = Buffer.from(msg.data, 'utf8');
  const kept = keptOfChunk(deps, e.id, msg.stream, msg.offset, data);
  if (kept === null) return; // the task's log cap was reached before: dropped
  const held = deps.store.logs.total(e.id, msg.stream);
  if (msg.offset > held)
    throw new BrokerError(
      'INVALID_INPUT',
      `log chunk at ${msg.stream} offset ${msg.offset} leaves a gap: the master holds ${held} bytes of it`,
      'Log chunk refused; a chunk must start at or before the end of what the master holds.',
    );
  deps.store.logs.putChunk(e.id, msg.stream, msg.offset, kept.data);
  if (kept.capped) {
    const cap = deps.config.storage.max_log_bytes_per_task;
    deps.store.logs.putChunk(
      e.id,
      msg.stream,
      msg.offset + kept.data.length,
      Buffer.from(`\n[gpu-broker: this task's log reached its cap of ${cap} bytes; the rest was dropped]\n`),
    );
    deps.logger.warn({ task_id: e.task_id, execution_id: e.id, cap }, 'task log capped');
  }
  deps.store.afterCommit(() => deps.notifier.notify(`logs:${e.task_id}`));
}

/**
 * How much of a log chunk fits under the task's cap (both streams together): null when the cap was
 * already reached (drop it: a resent chunk is already stored), else the bytes to keep and whether this
 * chunk reaches the cap (the caller then appends the one marker line).
 */
export function keptOfChunk(
  deps: BrokerDeps,
  executionId: string,
  stream: 'stdout' | 'stderr',
  offset: number,
  data: Buffer,
): { data: Buffer; capped: boolean } | null {
  const cap = deps.config.storage.max_log_bytes_per_task;
  const other = stream === 'stdout' ? 'stderr' : 'stdout';
  const used = deps.store.logs.total(executionId, stream) + deps.store.logs.total(executionId, other);
  if (used >= cap) return null;
  const room = cap - used;
  const end = offset + data.length;
  const beyond = Math.max(0, end - deps.store.logs.total(executionId, stream));
  if (beyond <= room) return { data, capped: false };
  return { data: data.subarray(0, data.length - (beyond - room)), capped: true };
}

/** Stores an output file after checking its size and sha256 (trust no worker). Call inside a transaction. */
export function handleOutputUpload(deps: BrokerDeps, workerId: string, msg: OutputMessage): void {
  const e = fenced(deps, workerId, msg.execution_id, msg.lease_epoch);
  const task = deps.store.tasks.get(e.task_id)!;
  if (!task.spec.outputs.some((o) => o.path === msg.path))
    throw new BrokerError(
      'INVALID_INPUT',
      `output ${msg.path} was not declared by the task`,
      'Only declared outputs are accepted.',
    );
  const content = Buffer.from(msg.content_base64, 'base64');
  const sha = createHash('sha256').update(content).digest('hex');
  if (content.length !== msg.size || sha !== msg.sha256)
    throw new BrokerError(
      'INVALID_INPUT',
      `output ${msg.path} does not match its size/sha256`,
      'Upload refused.',
    );
  deps.store.logs.putOutput(e.id, { path: msg.path, size: msg.size, sha256: sha }, content, deps.clock.now());
}
