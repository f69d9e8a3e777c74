import { isoUtc } from '../accounts/tree.js';
import type { WaitReason } from './types.js';

/**
 * Constructors for every {@link WaitReason}, so that each code always carries the same fields and a
 * message written for the agent that reads it: what blocks the task and what would unblock it.
 */

/** What a task asks for, in words ("8 cards", "2 cards of model "H100" with ≥ 81920 MiB"). */
export function describeNeed(need: number, model: string | null, minMemoryMib: number | null): string {
  let text = plural(need, 'card');
  if (model !== null) text += ` of model "${model}"`;
  if (minMemoryMib !== null) text += ` with ≥ ${minMemoryMib} MiB`;
  return text;
}

/**
 * A Slurm pool whose free count would hold a task but whose nodes would not (nodes.ts): the
 * task would pend in Slurm, so it stays queued and the message names the nodes' free GPUs.
 */
export interface NodeShortfall {
  worker_id: string;
  /** The task's `cards.per_node`, or null for a single-node task. */
  per_node: number | null;
  /** The pool's free count for the task. */
  pool_free: number;
  nodes: ReadonlyArray<{ name: string; free: number }>;
}

/** How many nodes a message lists before it says how many more there are. */
const NODES_LISTED = 16;

/**
 * Enough matching cards exist, but not enough are free on one worker right now; with `split`, a Slurm
 * pool has enough free in all but not on one node (or on enough nodes), and the message says so.
 */
export function waitingForCards(
  need: number,
  eligible: number,
  free: number,
  split: NodeShortfall | null = null,
): WaitReason {
  const message =
    split === null
      ? `Needs ${plural(need, 'card')} on one worker; at most ${free} matching ${free === 1 ? 'is' : 'are'} free ` +
        `on any worker (${eligible} eligible in all). It starts when running tasks release enough cards.`
      : nodeShortfallMessage(need, split);
  return { code: 'waiting_for_cards', need, eligible, free, message };
}

function nodeShortfallMessage(need: number, split: NodeShortfall): string {
  const listed = split.nodes
    .slice(0, NODES_LISTED)
    .map((n) => `${n.name}: ${n.free}`)
    .join(', ');
  const more = split.nodes.length > NODES_LISTED ? `, ${split.nodes.length - NODES_LISTED} more` : '';
  const free = `(${listed}${more})`;
  const w = split.worker_id;
  const total = `${split.pool_free} ${split.pool_free === 1 ? 'is' : 'are'} free across the pool`;
  if (split.per_node === null) {
    const most = Math.max(0, ...split.nodes.map((n) => n.free));
    return (
      `Needs ${plural(need, 'card')} on one node; worker ${w}'s nodes have at most ${most} free ${free}, ` +
      `though ${total}. It starts when running jobs release enough GPUs on one node; a multi-node ` +
      'spec (cards.per_node) could use GPUs spread over nodes.'
    );
  }
  const perNode = split.per_node;
  const nodes = Math.ceil(need / perNode);
  const enough = split.nodes.filter((n) => n.free >= perNode).length;
  return (
    `Needs ${plural(nodes, 'node')} with ${perNode} free GPUs each; worker ${w} has ${enough} such ` +
    `${enough === 1 ? 'node' : 'nodes'} ${free}, though ${total}. It starts when running jobs release ` +
    'enough GPUs on enough nodes.'
  );
}

/** It would fit, but the free cards are held for an aged task ahead of it in the queue. */
export function reservedForOlderTask(taskPosition: number, workerId: string): WaitReason {
  return {
    code: 'reserved_for_older_task',
    task_position: taskPosition,
    worker_id: workerId,
    message:
      `The free cards it could use on ${workerId} are reserved for the task at queue position ` +
      `${taskPosition}, which has waited longer; it runs after that task starts or more cards free up.`,
  };
}

/** This aged task holds free cards and waits for the rest on the same worker. */
export function holdingReservation(workerId: string, held: number, need: number): WaitReason {
  return {
    code: 'holding_reservation',
    worker_id: workerId,
    held,
    need,
    message:
      `Waited past the reservation time, so it holds ${held} of the ${plural(need, 'card')} it needs on ` +
      `${workerId}; later tasks cannot take them. It starts when the rest are released there.`,
  };
}

/** The pinned worker is offline or draining. */
export function workerOffline(workerId: string, draining: boolean): WaitReason {
  return {
    code: 'worker_offline',
    worker_id: workerId,
    draining,
    message: draining
      ? `Pinned to worker ${workerId}, which an operator is draining; it waits until the worker is undrained, or drop the pin.`
      : `Pinned to worker ${workerId}, which is offline; it waits until the worker reconnects, or drop the pin.`,
  };
}

/** Every worker with enough matching cards is offline or draining. */
export function workersOffline(need: number, offline: number, draining: number): WaitReason {
  return {
    code: 'workers_offline',
    need,
    offline,
    draining,
    message:
      `Every worker with ${plural(need, 'matching card')} is unavailable (${offline} offline, ` +
      `${draining} draining); it waits until one is back.`,
  };
}

/** No worker the task may use has enough matching cards, in any state: it cannot start as specified. */
export function noMatchingWorker(
  needText: string,
  need: number,
  largest: number,
  pinned: string | null,
): WaitReason {
  const where = pinned === null ? 'any worker' : `worker ${pinned}`;
  return {
    code: 'no_matching_worker',
    need,
    largest,
    message:
      `Needs ${needText} on one worker, but ${where} has at most ${largest}. It cannot start as specified: ` +
      `lower cards.count, relax cards.model or cards.min_memory_mib, or change the pinned worker.`,
  };
}

/** A multi-node task (`cards.per_node`), but no worker it may use is a Slurm pool. */
export function multiNodeNeedsSlurm(
  need: number,
  perNode: number,
  capable: number,
  pinned: string | null,
): WaitReason {
  const where =
    pinned === null
      ? `none of the ${plural(capable, 'worker')} with enough cards is`
      : `worker ${pinned} is not`;
  return {
    code: 'multi_node_needs_slurm',
    need,
    per_node: perNode,
    message:
      `Needs ${plural(need, 'card')} across nodes (${perNode} per node), which only a Slurm worker can place, ` +
      `and ${where} one (gpu-broker worker --backend slurm). Drop cards.per_node to run on one host, or wait for a Slurm worker.`,
  };
}

/** A container task, but no worker with enough matching cards has a container engine. */
export function noContainerEngine(need: number, withoutEngine: number, pinned: string | null): WaitReason {
  const where =
    pinned === null
      ? `none of the ${plural(withoutEngine, 'worker')} with ${plural(need, 'matching card')} has one`
      : `pinned worker ${pinned} has none`;
  return {
    code: 'no_container_engine',
    need,
    without_engine: withoutEngine,
    message:
      `A container task needs a worker with a container engine (podman or docker), but ${where}. ` +
      'It waits until such a worker connects; or run it as runtime kind "process".',
  };
}

/** No worker with enough matching cards offers every named data mount the task asks for. */
export function mountMissing(need: number, mounts: readonly string[], pinned: string | null): WaitReason {
  const where =
    pinned === null ? `no worker with ${plural(need, 'matching card')}` : `pinned worker ${pinned}`;
  return {
    code: 'mount_missing',
    need,
    mounts: [...mounts],
    message:
      `The task asks for the data mount(s) ${mounts.join(', ')}, and ${where} offers all of them. ` +
      'It waits until such a worker connects; an operator declares mounts with `gpu-broker worker --mount NAME=PATH`, ' +
      'or drop the mounts the task does not need.',
  };
}

/**
 * The spec asks for more of a host-bound limit than the host of any worker with enough matching cards can
 * give (docs/security.md "The task sandbox"): `most` is the largest that one of them can, and `basis` says how it is derived.
 */
export function limitsExceedHost(
  need: number,
  short: { name: string; ask: number; most: number },
  basis: string,
  pinned: string | null,
): WaitReason {
  const where =
    pinned === null ? `the largest worker with ${plural(need, 'matching card')}` : `pinned worker ${pinned}`;
  return {
    code: 'limits_exceed_host',
    need,
    limit: short.name,
    ask: short.ask,
    most: short.most,
    message:
      `The spec asks for limits.${short.name} ${short.ask}, more than ${where} can give: at most ${short.most} ` +
      `(${basis}). It waits until a worker with a larger host connects; or ask for at most ${short.most}, ` +
      'or omit the limit for the default share of the host.',
  };
}

/**
 * Enough matching cards are free on `workerId`, but what its host has left of `resource` (its RAM, or the
 * disk free when it started, less the reserve and what its running tasks were given) is less than the
 * task would be given.
 */
export function waitingForHostRoom(
  resource: 'memory_mib' | 'disk_mib' | 'cpus',
  workerId: string,
  need: number,
  free: number,
): WaitReason {
  if (resource === 'cpus')
    return {
      code: 'waiting_for_host_room',
      resource,
      worker_id: workerId,
      need_cpus: need,
      free_cpus: free,
      message:
        `Cards are free on ${workerId}, but its host has ${Math.max(0, free)} CPU(s) left that no running task asked ` +
        `for, and this task asks for ${need} (limits.cpus). It starts when tasks there end; or ask for fewer CPUs.`,
    };
  const what = resource === 'memory_mib' ? 'memory' : 'disk for task dirs';
  return {
    code: 'waiting_for_host_room',
    resource,
    worker_id: workerId,
    need_mib: need,
    free_mib: free,
    message:
      `Cards are free on ${workerId}, but its host has ${free} MiB of ${what} left that no running task was ` +
      `promised, and this task would be given ${need} MiB (its limits.${resource}, or its default share of ` +
      `the host). It starts when tasks there end; or ask for less (limits.${resource}).`,
  };
}

/** The only workers that could take the task run tasks unsandboxed, and the policy requires isolation. */
export function workerUnisolated(need: number, unisolated: number, pinned: string | null): WaitReason {
  const who =
    pinned === null
      ? `Every worker with ${plural(need, 'matching card')} (${unisolated}) runs tasks`
      : `Pinned worker ${pinned} runs tasks`;
  return {
    code: 'worker_unisolated',
    need,
    unisolated,
    message:
      `${who} without a sandbox (isolation "none"), and policy.require_isolation keeps tasks off such ` +
      'workers. An operator restarts the worker with bubblewrap isolation (--isolation bwrap), or sets ' +
      'policy.require_isolation to false to accept unsandboxed runs.',
  };
}

/** Unknown pinned worker: nothing of that id is enrolled. */
export function unknownPinnedWorker(need: number, workerId: string): WaitReason {
  return {
    code: 'no_matching_worker',
    need,
    largest: 0,
    message: `Pinned to worker ${workerId}, which is not enrolled; pin an enrolled worker or drop the pin.`,
  };
}

/** Cordons are what keep it off every usable worker. */
export function cordoned(need: number, uncordoned: number): WaitReason {
  return {
    code: 'cordoned',
    need,
    uncordoned,
    message:
      `Needs ${plural(need, 'card')} on one worker, but cordons leave at most ${uncordoned} matching on any ` +
      `usable worker; it waits until an operator uncordons cards.`,
  };
}

/** Granting it would take its owner past the per-owner card limit. */
export function quotaExceeded(limit: number, inUse: number, need: number): WaitReason {
  const message =
    need > limit
      ? `Needs ${plural(need, 'card')}, more than the per-owner limit of ${limit}; it can never start as specified.`
      : `Its owner holds ${plural(inUse, 'card')}; ${need} more would exceed the per-owner limit of ${limit}. ` +
        `It starts when the owner's other tasks release cards.`;
  return { code: 'quota_exceeded', limit, in_use: inUse, need, message };
}

/** An account (or one above it) at the most cards its quota lets its tasks hold. */
export function accountQuotaExceeded(
  account: string,
  nominal: number,
  borrowingLimit: number,
  held: number,
  need: number,
): WaitReason {
  const limit = nominal + borrowingLimit;
  const message =
    need > limit
      ? `Needs ${plural(need, 'card')}, more than account ${account} may ever hold (nominal ${nominal} + borrowing ${borrowingLimit}); it can never start as specified.`
      : `Account ${account} holds ${plural(held, 'card')} of its ${limit} (nominal ${nominal} + borrowing ${borrowingLimit}); ` +
        `${need} more would pass it. It starts when the account's tasks release cards, or an operator raises the quota (gpu-broker account set ${account} --nominal/--borrow).`;
  return {
    code: 'account_quota_exceeded',
    account,
    limit,
    nominal,
    borrowing_limit: borrowingLimit,
    held,
    need,
    message,
  };
}

/** An account (or one above it) spent its card-hour budget for this period. */
export function accountBudgetExhausted(
  account: string,
  budgetSeconds: number,
  usedSeconds: number,
  resetsAt: number,
): WaitReason {
  const hours = (s: number) => Math.round((s / 3600) * 100) / 100;
  const message =
    `Account ${account} used ${hours(usedSeconds)} of its ${hours(budgetSeconds)} card-hours this period; ` +
    `its tasks wait until the budget resets at ${isoUtc(resetsAt)} or an operator raises it (gpu-broker account set ${account} --budget).`;
  return {
    code: 'account_budget_exhausted',
    account,
    budget_card_hours: hours(budgetSeconds),
    used_card_hours: hours(usedSeconds),
    resets_at: resetsAt,
    message,
  };
}

function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** Its grants failed to apply `failures` times in a row; it waits until `retry_at` (ms). */
export function grantFailed(backoff: { failures: number; retry_at: number; error: string }): WaitReason {
  return {
    code: 'grant_failed',
    failures: backoff.failures,
    retry_at: backoff.retry_at,
    error: backoff.error,
    message:
      `Granting cards to this task failed ${backoff.failures} times (${backoff.error}); it is retried ` +
      "with a growing delay. An operator should check the worker's card list (get_status alerts).",
  };
}

/** Cards are being reclaimed for this task: `preempted` were asked to stop on `worker_id`. */
export function reclaiming(
  worker_id: string,
  preempted: string[],
  cards: number,
  grace_seconds: number,
): WaitReason {
  return {
    code: 'reclaiming',
    worker_id,
    preempted,
    cards,
    grace_seconds,
    message:
      `Your account asks within its nominal share and no cards were free, so ${preempted.length} preemptible ` +
      `task(s) of accounts borrowing beyond their share (${preempted.join(', ')}) were asked to give back ` +
      `${cards} card(s) on worker ${worker_id}; this task starts there once they stop (within ${grace_seconds} s ` +
      'and their cleanup). Nothing to do but wait.',
  };
}
