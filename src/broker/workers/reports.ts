import { createHash } from 'node:crypto';
import type { z } from 'zod';
import { BrokerError } from '../../contracts/errors.js';
import type {
  LogMessageSchema,
  OutputMessageSchema,
  SlurmJobReport,
} from '../../contracts/worker-protocol.js';
import {
  type ExecutionReport,
  fenceReport,
  type ReportReaction,
  type ReportSnapshot,
  reactToReport,
} from '../../domain/machines/execution-report.js';
import type { ExecutionRecord } from '../../store/leases-repo.js';
import type { BrokerDeps } from '../deps.js';
import { cancelIfGrantLapsed } from '../grant-fence.js';
import { markExecutionLost, moveExecution, resumeExecution } from '../machines/execution.js';
import { moveLease } from '../machines/lease.js';
import { moveTask } from '../machines/task.js';
import { taskTopic } from '../topics.js';

/**
 * What the master does with a worker's reports about an execution (docs/state-machines.md, docs/worker-protocol.md). Every report is
 * fenced: it must come from the execution's worker and carry the execution's lease_epoch. Reports are
 * idempotent: a phase the execution already passed is acknowledged and ignored. What an `execution`
 * report changes is decided by `reactToReport` (src/domain/machines/execution-report.ts); this file applies it.
 */

type LogMessage = z.infer<typeof LogMessageSchema>;
type OutputMessage = z.infer<typeof OutputMessageSchema>;

/** The execution a report or upload names, fenced (see `fenceReport`); throws the refusal. */
function fenced(deps: BrokerDeps, workerId: string, executionId: string, epoch: number): ExecutionRecord {
  const e = deps.store.leases.execution(executionId) ?? null;
  const refusal = fenceReport(workerId, e, { execution_id: executionId, lease_epoch: epoch });
  if (refusal !== null || e === null) throw new BrokerError(refusal!.code, refusal!.message, refusal!.hint);
  return e;
}

/** What an applied `execution` report leaves for the hub: its answer, and whether a pass may help. */
export interface ReportOutcome {
  /** The INVALID_STATE answer to an illegal report (its changes committed), else null. */
  answer: BrokerError | null;
  /** Whether the report changed something a scheduling pass reads (see `reschedules`). */
  reschedule: boolean;
}

/**
 * Whether a reaction can change what the next scheduling pass decides (a pass per report was
 * a third of the master's CPU per task). A pass reads the queue, the live leases' cards (ACTIVE and
 * RELEASING alike hold them), owners' running cards, samples and pool bindings. So an execution's own
 * phase, a task leaving ASSIGNED (`started`) or RUNNING (`exited`: to FINALIZING, never to the queue)
 * and a lease going ACTIVE → RELEASING (`execution_ended`) change nothing a pass reads; a lease that
 * frees or quarantines its cards, a task that ends or is re-queued, a binding or a release do.
 */
const PASS_NEUTRAL_TASK_EVENTS: ReadonlySet<string> = new Set(['started', 'exited']);

const RESCHEDULES: { readonly [K in ReportReaction['kind']]: (r: ReportReaction & { kind: K }) => boolean } =
  {
    refuse: () => false,
    record_slurm: () => true,
    slurm_bound: () => true,
    move_task: (r) => !PASS_NEUTRAL_TASK_EVENTS.has(r.event),
    task_unmoved: () => false,
    move_lease: (r) => r.event !== 'execution_ended',
    move_execution: () => false,
    mark_lost: () => true,
    answer: () => false,
    release_held: () => true,
    // A quarantined lease back to ACTIVE: its cards count against the owner's quota again.
    resume: () => true,
  };

/** Whether any of a report's reactions may change the next pass's decision (see RESCHEDULES). */
export function reschedules(reactions: readonly ReportReaction[]): boolean {
  return reactions.some((r) => (RESCHEDULES[r.kind] as (r: ReportReaction) => boolean)(r));
}

/**
 * Handles an `execution` report in one transaction (a savepoint inside the hub's): reads the snapshot,
 * asks `reactToReport` (src/domain/machines/execution-report.ts) what it changes, and applies the reactions in
 * order, each move through its machine (compare-and-set, audit row). Throws a refusal (nothing
 * changed); returns the INVALID_STATE answer to an illegal report after committing what it changed
 * (task RECONCILIATION_REQUIRED, lease QUARANTINED), else a null answer.
 */
export function handleExecutionReport(
  deps: BrokerDeps,
  workerId: string,
  msg: ExecutionReport,
): ReportOutcome {
  return deps.store.transaction(() => {
    const read = deps.store.leases.executionAndSlurm(msg.execution_id);
    const e = read?.execution ?? null;
    const reactions = reactToReport(reportSnapshot(deps, workerId, e, read?.slurm ?? null), msg);
    const refusal = reactions.find((r): r is ReportReaction & { kind: 'refuse' } => r.kind === 'refuse');
    if (refusal !== undefined) throw new BrokerError(refusal.code, refusal.message, refusal.hint);
    // reactToReport refuses a report about an execution the master does not have.
    return { answer: applyReport(deps, e!, reactions), reschedule: reschedules(reactions) };
  });
}

/**
 * What the master holds about the reported execution (`e`, already read with its Slurm job `slurm`),
 * for `reactToReport`.
 */
function reportSnapshot(
  deps: BrokerDeps,
  workerId: string,
  e: ExecutionRecord | null,
  slurm: SlurmJobReport | null,
): ReportSnapshot {
  const now = deps.clock.now();
  // Only the fence reads an execution of another worker; nothing else of it is read.
  if (e === null || e.worker_id !== workerId) return { worker_id: workerId, records: null, now };
  // The task's state fields and declared outputs only: its spec is not parsed for a report.
  const task = deps.store.tasks.reportFacts(e.task_id)!;
  const lease = deps.store.leases.lease(e.lease_id)!;
  return {
    worker_id: workerId,
    now,
    records: {
      execution: e,
      slurm_binding: slurm?.binding ?? null,
      task: {
        state: task.state,
        desired: task.desired,
        failure_reason: task.failure_reason,
        reason: task.reason_code,
        outputs: task.outputs,
      },
      lease: { state: lease.state, cards: lease.cards.map((c) => c.index) },
      preempting: deps.store.preemptions.ofLease(lease.id) !== undefined,
      stored_outputs: deps.store.logs.outputs(e.id),
    },
  };
}

/** Applies `reactToReport`'s reactions in order; see handleExecutionReport. Call inside a transaction. */
function applyReport(
  deps: BrokerDeps,
  e: ExecutionRecord,
  reactions: readonly ReportReaction[],
): BrokerError | null {
  const { store } = deps;
  let answer: BrokerError | null = null;
  for (const r of reactions) {
    switch (r.kind) {
      case 'refuse': // thrown by handleExecutionReport before anything is applied
        break;
      case 'record_slurm':
        store.leases.setExecutionSlurm(e.id, r.slurm);
        break;
      case 'slurm_bound':
        store.audit.append({
          at: deps.clock.now(),
          actor: e.worker_id,
          action: 'execution.slurm_bound',
          subject_type: 'task',
          subject_id: e.task_id,
          data: { execution_id: e.id, job_id: r.job_id, binding: r.binding },
        });
        break;
      case 'move_task': {
        const moved = moveTask(deps, store.tasks.get(e.task_id)!, r.event, 'worker', r.changes, {
          ...r.data,
        });
        // A preempted run queued again under a standing grant that lapsed meanwhile is not started again
        // (ADR 0029): cancelled now, as the sweeper cancels the grant's other queued runs, rather than
        // waiting for cards only to be cancelled when it would get them.
        if (r.event === 'cleaned_preempted') cancelIfGrantLapsed(deps, moved, 'master');
        break;
      }
      case 'task_unmoved':
        deps.logger.info(
          { task_id: e.task_id, state: r.state, event: r.event },
          'late worker report ignored by task state machine',
        );
        break;
      case 'move_lease':
        moveLease(deps, store.leases.lease(e.lease_id)!, r.event, 'worker', r.reason);
        break;
      case 'move_execution':
        moveExecution(deps, e, r.phase, 'worker', r.changes);
        break;
      case 'mark_lost':
        deps.logger.warn(
          { execution_id: e.id, task_id: e.task_id, phase: e.phase, reported: r.reported },
          'illegal execution report',
        );
        markExecutionLost(deps, e, 'master', r.reason, { reported: r.reported, phase: e.phase });
        break;
      case 'answer':
        answer = new BrokerError(r.code, r.message, r.hint);
        break;
      case 'resume':
        resumeExecution(deps, e, r.event, r.phase, { worker_id: e.worker_id, by: 'report' });
        break;
      case 'release_held': {
        const cards = [...r.cards];
        store.afterCommit(() => deps.cluster.fleet.releaseHeld(e.worker_id, cards));
        break;
      }
    }
  }
  // A notification carries no data (listeners re-read), so one covers every change above.
  if (reactions.length > 0) store.afterCommit(() => deps.notifier.notify(taskTopic(e.task_id)));
  return answer;
}

/**
 * Stores a log chunk at its byte offset. Call inside a transaction. A chunk must start within what the
 * master already holds of its stream (docs/state-machines.md): a gap, or a jump to 2^53, is refused, so
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
  // Each total is one indexed aggregate over the stream's chunks: read once per chunk, not per check.
  const held = deps.store.logs.total(e.id, msg.stream);
  const other = deps.store.logs.total(e.id, msg.stream === 'stdout' ? 'stderr' : 'stdout');
  const cap = deps.config.storage.max_log_bytes_per_task;
  const kept = keptOfChunk(cap, held, other, msg.offset, data);
  if (kept === null) return; // the task's log cap was reached before: dropped
  if (msg.offset > held)
    throw new BrokerError(
      'INVALID_INPUT',
      `log chunk at ${msg.stream} offset ${msg.offset} leaves a gap: the master holds ${held} bytes of it`,
      'Log chunk refused; a chunk must start at or before the end of what the master holds.',
    );
  if (kept.data.length > 0) deps.store.logs.putChunk(e.id, msg.stream, msg.offset, kept.data);
  if (kept.capped) {
    deps.store.logs.putChunk(
      e.id,
      msg.stream,
      Math.max(held, msg.offset + kept.data.length),
      Buffer.from(`\n[gpu-broker: this task's log reached its cap of ${cap} bytes; the rest was dropped]\n`),
    );
    deps.logger.warn({ task_id: e.task_id, execution_id: e.id, cap }, 'task log capped');
  }
  deps.store.afterCommit(() => deps.notifier.notify(`logs:${e.task_id}`));
}

/**
 * How much of a log chunk fits under the task's `cap` (both streams together), given the bytes held of
 * its stream (`held`) and of the other one (`other`): null when the cap was already reached and marked
 * (drop it: a resent chunk is already stored), else the bytes to keep and whether this chunk reaches the
 * cap (the caller then appends the one marker line). A worker cuts at the same cap (docs/performance.md "Noisy neighbours"), so its
 * log can fill the cap exactly: the first chunk past it then keeps nothing and places the marker. Pure.
 */
export function keptOfChunk(
  cap: number,
  held: number,
  other: number,
  offset: number,
  data: Buffer,
): { data: Buffer; capped: boolean } | null {
  const used = held + other;
  const beyond = Math.max(0, offset + data.length - held);
  // Above the cap means the marker is stored (it is the only thing ever stored past it).
  if (used > cap || (used === cap && beyond === 0)) return null;
  const room = cap - used;
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
