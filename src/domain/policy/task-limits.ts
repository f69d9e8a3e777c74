import type { Policy } from '../../contracts/policy.js';
import {
  type HostReserve,
  type HostResources,
  LIMIT_NAMES,
  type LimitName,
  MAX_CPU_WEIGHT,
  MAX_LIMIT_MIB,
  MAX_LIMIT_PIDS,
  type ResolvedLimits,
} from '../../contracts/task-limits.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import type { Add } from './types.js';

/**
 * A task's resource limits from its spec and the policy (docs/operations.md "Task limits"). Pure.
 *
 * Each limit is the spec's ask when it gives one, else the policy's per-card default times the cards
 * the task leases; an ask above the per-card maximum times the cards is an error finding
 * (LIMIT_OVER_POLICY), so the spec is saved as a draft but cannot go to review. The master resolves the
 * same way for the reviewer's view (sandboxOf) and for the plan (src/broker/loops/pass-apply.ts sandboxOfPlan).
 */

/** The largest value each limit can take, whatever the policy (the contract's bounds). */
const CEILING: Readonly<Record<LimitName, number>> = {
  memory_mib: MAX_LIMIT_MIB,
  pids: MAX_LIMIT_PIDS,
  cpu_weight: MAX_CPU_WEIGHT,
  tmp_mib: MAX_LIMIT_MIB,
  shm_mib: MAX_LIMIT_MIB,
  disk_mib: MAX_LIMIT_MIB,
};

/** What a task with `cards` cards gets for `perCard`, within the contract's bound. */
function scaled(name: LimitName, perCard: number, cards: number): number {
  return Math.min(CEILING[name], perCard * cards);
}

/** The most a spec leasing `cards` cards may ask for. */
export function maxLimits(policy: Policy, cards: number): ResolvedLimits {
  return mapLimits((n) => scaled(n, policy.task_limits.max_per_card[n], cards));
}

/**
 * The limits the host's RAM and disk bound (docs/security.md "The task sandbox"): the memory limit and the two tmpfs sizes
 * (whose pages count against memory) by RAM, the task dir by the data dir's file system.
 */
export const HOST_BOUND_LIMITS = ['memory_mib', 'tmp_mib', 'shm_mib', 'disk_mib'] as const;
/** One host-bound limit's name. */
export type HostBoundLimit = (typeof HOST_BOUND_LIMITS)[number];
/** What a spec may ask of a host: the host-bound limits, and CPUs (`limits.cpus`, counted only when asked). */
export type HostAsk = HostBoundLimit | 'cpus';
/** Every host ask, in the order a shortfall is looked for. */
export const HOST_ASKS: readonly HostAsk[] = [...HOST_BOUND_LIMITS, 'cpus'];

/** What a worker's host can give its tasks: the whole of it (less the reserve), and per card. */
export interface HostAllowance {
  /** The most one task there may take, by limit (and CPUs). */
  readonly total: Readonly<Record<HostAsk, number>>;
  /** A card's fair share: what a task gets per card by default there. */
  readonly per_card: Readonly<Record<HostBoundLimit, number>>;
  /** For messages: `24 GiB RAM less a 4096 MiB reserve, over 4 cards`. */
  readonly basis: string;
}

/**
 * What tasks on a host with `cards` cards may take (docs/security.md "The task sandbox"): its RAM and disk less the
 * operator's reserve (`task_limits.host_reserve`: the worker, the master, the system), whole for one
 * task, and shared evenly per card for the defaults. Never below 1 MiB (a host smaller than its reserve
 * gives every task the least there is, and rules out any task asking for more).
 */
export function hostAllowance(host: HostResources, cards: number, reserve: HostReserve): HostAllowance {
  const memory = Math.max(1, host.memory_mib - reserve.memory_mib);
  const disk = Math.max(1, host.disk_mib - reserve.disk_mib);
  const cpus = Math.max(1, host.cpus - (reserve.cpus ?? 0));
  const n = Math.max(1, cards);
  const total = { memory_mib: memory, tmp_mib: memory, shm_mib: memory, disk_mib: disk, cpus };
  const share = (v: number) => Math.max(1, Math.floor(v / n));
  return {
    total,
    per_card: {
      memory_mib: share(memory),
      tmp_mib: share(memory),
      shm_mib: share(memory),
      disk_mib: share(disk),
    },
    basis: `${host.memory_mib} MiB RAM, ${host.disk_mib} MiB disk and ${host.cpus} CPUs, less a reserve of ${reserve.memory_mib} MiB, ${reserve.disk_mib} MiB and ${reserve.cpus ?? 0} CPUs, over ${n} card(s)`,
  };
}

/** The first limit the spec asks for above what `allowance` can give, or null. */
export function hostShortfall(
  asks: Partial<Record<HostAsk, number>>,
  allowance: Pick<HostAllowance, 'total'>,
): { name: HostAsk; ask: number; most: number } | null {
  for (const name of HOST_ASKS) {
    const ask = asks[name];
    if (ask !== undefined && ask > allowance.total[name]) return { name, ask, most: allowance.total[name] };
  }
  return null;
}

/**
 * The limits the task runs with: the spec's asks, clamped to the policy maximum (a spec over it never
 * reaches a worker, but a policy lowered after approval wins), else the per-card defaults. On a worker
 * whose host is known (`allowance`), the defaults are at most its share per card and no value is above
 * what the host can give (the scheduler places a task asking for more nowhere: `hostShortfall`).
 */
export function resolveLimits(
  spec: Pick<TaskSpec, 'cards' | 'limits'>,
  policy: Policy,
  allowance?: HostAllowance,
): ResolvedLimits {
  const cards = spec.cards.count;
  const { per_card, max_per_card } = policy.task_limits;
  return mapLimits((n) => resolveOne(n, spec.limits?.[n], cards, per_card[n], max_per_card[n], allowance));
}

/**
 * One limit as resolveLimits gives it: the ask, else the per-card default times the cards (at most the
 * host's share per card, where the host is known); never above the policy's maximum nor the host's whole.
 * The scheduler uses it to count what a task would take of its host's memory (scheduling/pool.ts).
 */
export function resolveOne(
  name: LimitName,
  ask: number | undefined,
  cards: number,
  perCard: number,
  maxPerCard: number,
  allowance?: HostAllowance,
): number {
  let value = ask ?? scaled(name, perCard, cards);
  if (allowance !== undefined && isHostBound(name)) {
    if (ask === undefined) value = Math.min(value, scaled(name, allowance.per_card[name], cards));
    value = Math.min(value, allowance.total[name]);
  }
  return Math.min(value, scaled(name, maxPerCard, cards));
}

function isHostBound(name: LimitName): name is HostBoundLimit {
  return (HOST_BOUND_LIMITS as readonly string[]).includes(name);
}

/**
 * Error findings for asks above the policy maximum; a warning (LIMIT_ABOVE_HOSTS) for an ask within it
 * that no enrolled host can give (`largestHost`, what one task may take on the largest): the task would
 * wait (`limits_exceed_host`) until a larger worker connects, so the agent and the reviewer hear it now.
 */
export function checkLimits(
  spec: TaskSpec,
  policy: Policy,
  add: Add,
  largestHost?: Readonly<Record<HostAsk, number>>,
): void {
  const max = maxLimits(policy, spec.cards.count);
  // CPUs have no policy maximum (no default either): only what the largest host can give bounds them.
  const cpus = spec.limits?.cpus;
  if (cpus !== undefined && largestHost !== undefined && cpus > largestHost.cpus)
    add(
      'warning',
      'LIMIT_ABOVE_HOSTS',
      'limits.cpus',
      `limits.cpus ${cpus} requested; the largest enrolled worker's host has at most ${largestHost.cpus} CPUs for tasks (its CPUs less the operator's reserve), so the task would wait for a larger one`,
      `Ask for at most ${largestHost.cpus}, or omit limits.cpus for no CPU quota.`,
    );
  for (const name of LIMIT_NAMES) {
    const ask = spec.limits?.[name];
    if (ask === undefined) continue;
    if (ask <= max[name]) {
      const most = largestHost !== undefined && isHostBound(name) ? largestHost[name] : undefined;
      if (most !== undefined && ask > most)
        add(
          'warning',
          'LIMIT_ABOVE_HOSTS',
          `limits.${name}`,
          `limits.${name} ${ask} requested; the largest enrolled worker's host can give one task at most ${most} (its RAM or free disk less the operator's reserve), so the task would wait for a larger one`,
          `Ask for at most ${most}, or omit limits.${name} for the default share of the host it runs on.`,
        );
      continue;
    }
    add(
      'error',
      'LIMIT_OVER_POLICY',
      `limits.${name}`,
      `limits.${name} ${ask} requested; the policy allows at most ${max[name]} for ${spec.cards.count} card(s) (${policy.task_limits.max_per_card[name]} per card)`,
      `Use limits.${name} between 1 and ${max[name]}, or omit it for the default of ${scaled(name, policy.task_limits.per_card[name], spec.cards.count)}.`,
    );
  }
}

/** One line for people: `memory 16384 MiB, pids 4096, cpu weight 100, /tmp 8192 MiB, …`. */
export function describeLimits(l: ResolvedLimits): string {
  return [
    `memory ${l.memory_mib} MiB`,
    `pids ${l.pids}`,
    `cpu weight ${l.cpu_weight}`,
    `/tmp ${l.tmp_mib} MiB`,
    `/dev/shm ${l.shm_mib} MiB`,
    `task dir ${l.disk_mib} MiB`,
  ].join(', ');
}

function mapLimits(f: (name: LimitName) => number): ResolvedLimits {
  return {
    memory_mib: f('memory_mib'),
    pids: f('pids'),
    cpu_weight: f('cpu_weight'),
    tmp_mib: f('tmp_mib'),
    shm_mib: f('shm_mib'),
    disk_mib: f('disk_mib'),
  };
}
