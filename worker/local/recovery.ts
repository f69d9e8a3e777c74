import { readFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { Clock } from '../../src/platform/clock.js';
import { cardsCleanCheck } from '../executions/card-check.js';
import { phaseBody } from '../executions/reports.js';
import type { OutboxSender } from '../link/outbox.js';
import type { CardSampler } from '../samplers/card-sampler.js';
import type { ContainerSetup } from '../sandbox/container.js';
import { engineOutput, labelledContainers } from '../sandbox/container.js';
import type { ExecutionRecord, ExecutionSummary, LocalStore } from '../store/local-store.js';
import type { GroupMember } from './process-group.js';
import { bootId, liveGroupMembers, processStartTime, signalGroup } from './process-group.js';

/**
 * Executions a previous worker process left unfinished (docs/worker-protocol.md). They are never run again:
 *
 *   1. (at startup, before connecting) `accepted` / `started` ones are reported `exited` with
 *      WORKER_LOST, "worker restarted"; `exited` ones already were.
 *   2. their process group, when its pgid was recorded and it is still this execution's, gets SIGTERM,
 *      the plan's kill grace, SIGKILL; a container task's container (found by its label, since the
 *      engine, not the group, holds it) gets `stop -t <grace>` and `rm -f`;
 *   3. then the cleanup receipt as for a normal run: the group gone and (real cards) the cards clean,
 *      polled for the plan's cleanup_timeout_seconds → `cleaned` or `cleanup_failed`.
 *
 * A recorded pgid may have been reused by an unrelated process since (after a reboot, certainly), so a
 * group only counts as this execution's when its leader is the process recorded with it (start time and
 * boot id, worker-store version 7), or, for a record from before, when one of its processes carries the
 * execution's GPU_BROKER_EXECUTION_ID in its environment; other groups are never signalled.
 */

/** What recovery needs from the daemon. */
export interface RecoveryDeps {
  readonly store: LocalStore;
  readonly outbox: OutboxSender;
  readonly logger: Logger;
  readonly sampler: CardSampler;
  /** The container engine, for executions of container tasks; absent: their cleanup cannot be confirmed. */
  readonly containers?: ContainerSetup;
  /** How often the receipt is polled (ms, default 200). */
  readonly pollMs?: number;
  /** Aborting stops the cleanup checks without reporting; the next worker process takes them over. */
  readonly signal: AbortSignal;
  /** The daemon's clock: the kill grace and the cleanup deadline are read from it. */
  readonly clock: Clock;
}

const DEFAULT_POLL_MS = 200;
const LOST_DETAIL = 'worker restarted';

/** Step 1 now; returns a promise for steps 2–3 of every execution (it never rejects). */
export function recoverUnfinished(deps: RecoveryDeps): Promise<void> {
  const { store, outbox, logger } = deps;
  const records = store.listUnfinishedExecutions();
  const pending: ExecutionRecord[] = [];
  for (const record of records) {
    if (record.phase === 'exited') {
      pending.push(record);
      continue;
    }
    const result: ExecutionSummary = {
      exit_code: null,
      signal: null,
      failure_reason: 'WORKER_LOST',
      outputs: [],
      detail: LOST_DETAIL,
    };
    logger.warn(
      { execution_id: record.execution_id, phase: record.phase, pgid: record.pgid },
      'worker: an execution was left unfinished by a previous worker process; reporting it lost',
    );
    pending.push(
      store.transaction(() => {
        const exited = store.moveExecution(record.execution_id, record.phase, 'exited', result);
        outbox.enqueue(phaseBody(exited));
        return exited;
      }),
    );
  }
  return Promise.all(pending.map((r) => confirmCleanup(deps, r))).then(() => undefined);
}

async function confirmCleanup(deps: RecoveryDeps, record: ExecutionRecord): Promise<void> {
  const { store, outbox, logger, signal, clock } = deps;
  const { plan, pgid } = record;
  const id = plan.execution_id;
  try {
    // 2. stop what is left of the group
    if (pgid !== null && (await membersOf(record, pgid)).length > 0) {
      logger.warn({ execution_id: id, pgid }, 'worker: stopping the process group of a lost execution');
      signalGroup(pgid, 'SIGTERM');
      const graceEnd = clock.now() + plan.kill_grace_seconds * 1000;
      while (clock.now() < graceEnd && (await membersOf(record, pgid)).length > 0) await sleep(50);
      if ((await membersOf(record, pgid)).length > 0) signalGroup(pgid, 'SIGKILL');
    }
    const container = plan.spec.runtime.kind === 'container';
    if (container && deps.containers !== undefined) await removeContainers(deps, id, plan.kill_grace_seconds);
    // 3. the receipt
    const check = cardsCleanCheck(deps.sampler, plan.cards, plan.vram_clean_pct);
    const deadline = clock.now() + plan.cleanup_timeout_seconds * 1000;
    for (;;) {
      if (signal.aborted) return;
      const problems: string[] = [];
      if (pgid !== null) {
        const left = await membersOf(record, pgid);
        if (left.length > 0)
          problems.push(
            `process group ${pgid} still has live processes: ${left.map(describeMember).join(', ')}`,
          );
      }
      if (container) problems.push(...(await containerProblems(deps.containers, id)));
      if (check !== undefined) {
        try {
          const cards = await check();
          if (!cards.clean) problems.push(`cards not clean: ${cards.detail ?? 'no detail'}`);
        } catch (err) {
          problems.push(`card check failed: ${(err as Error)?.message ?? String(err)}`);
        }
      }
      if (signal.aborted) return;
      const cleaned = problems.length === 0;
      if (cleaned || clock.now() >= deadline) {
        const group = pgid === null ? 'no process group was recorded' : `process group ${pgid} is gone`;
        const detail = cleaned
          ? `${LOST_DETAIL}; ${group}${check === undefined ? ' (no card check)' : ' and the cards are clean'}`
          : `${LOST_DETAIL}; not clean after ${plan.cleanup_timeout_seconds}s: ${problems.join('; ')}`;
        const exit = store.getExecution(id)?.result ?? record.result;
        const result: ExecutionSummary = {
          exit_code: exit?.exit_code ?? null,
          signal: exit?.signal ?? null,
          failure_reason: exit?.failure_reason ?? 'WORKER_LOST',
          outputs: exit?.outputs ?? [],
          cleaned,
          detail,
        };
        const phase = cleaned ? 'cleaned' : 'cleanup_failed';
        outbox.enqueue(phaseBody(store.moveExecution(id, 'exited', phase, result)));
        logger.info({ execution_id: id, phase, detail }, 'worker: lost execution accounted for');
        return;
      }
      await sleep(Math.min(deps.pollMs ?? DEFAULT_POLL_MS, Math.max(1, deadline - clock.now())));
    }
  } catch (err) {
    logger.error(
      { execution_id: id, err: (err as Error)?.message },
      'worker: recovery of an execution failed',
    );
  }
}

/** Stops and removes the containers labelled with the execution id, leaving no record behind. */
async function removeContainers(deps: RecoveryDeps, id: string, graceSeconds: number): Promise<void> {
  const setup = deps.containers;
  if (setup === undefined) return;
  for (const name of (await labelledContainers(setup, id)) ?? []) {
    deps.logger.warn(
      { execution_id: id, container: name },
      'worker: removing the container of a lost execution',
    );
    await engineOutput(setup, ['stop', '--time', String(Math.ceil(graceSeconds)), name]);
    await engineOutput(setup, ['rm', '--force', name]);
  }
}

/** Why a container task's cleanup is not confirmed yet; [] when no container of it is left. */
async function containerProblems(setup: ContainerSetup | undefined, id: string): Promise<string[]> {
  if (setup === undefined)
    return ['no container engine on this worker to confirm the task container is gone'];
  const left = await labelledContainers(setup, id);
  if (left === null) return [`${setup.engine} ps did not answer`];
  return left.length === 0 ? [] : [`containers still present: ${left.join(', ')}`];
}

/**
 * The live members of the execution's recorded group when it is still that execution's; [] otherwise.
 * With the leader's identity recorded (worker-store version 7): another boot's group is never ours; a
 * leader alive with another start time means the pid was given to someone else; a leader alive with its
 * own, or gone while its group lives on (the kernel gives no process a pid still in use as a group id),
 * is ours — whatever the task did to its environment. Rows from before fall back to the execution id in a
 * member's environment (which a sandbox's bwrap holds, out of the task's reach).
 */
async function membersOf(record: ExecutionRecord, pgid: number): Promise<GroupMember[]> {
  const identity = record.pgid_identity;
  if (identity !== null) {
    if (identity.boot !== bootId()) return [];
    const leader = processStartTime(pgid);
    if (leader !== null && leader !== identity.start) return [];
    return liveGroupMembers(pgid);
  }
  const executionId = record.execution_id;
  const members = await liveGroupMembers(pgid);
  if (members.length === 0) return [];
  const marker = `GPU_BROKER_EXECUTION_ID=${executionId}`;
  for (const m of members) {
    try {
      const environ = await readFile(`/proc/${m.pid}/environ`, 'utf8');
      if (environ.split('\0').includes(marker)) return members;
    } catch {
      // Gone, or not ours to read: it cannot be a process this worker spawned.
    }
  }
  return [];
}

function describeMember(m: GroupMember): string {
  return `${m.pid} (${m.name})`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
