import type { Policy } from '../contracts/policy.js';
import {
  LIMIT_NAMES,
  type LimitName,
  MAX_CPU_WEIGHT,
  MAX_LIMIT_MIB,
  MAX_LIMIT_PIDS,
  type ResolvedLimits,
} from '../contracts/task-limits.js';
import type { TaskSpec } from '../contracts/task-spec.js';
import type { Add } from './policy-types.js';

/**
 * A task's resource limits from its spec and the policy (docs/operations.md "Task limits"). Pure.
 *
 * Each limit is the spec's ask when it gives one, else the policy's per-card default times the cards
 * the task leases; an ask above the per-card maximum times the cards is an error finding
 * (LIMIT_OVER_POLICY), so the spec is saved as a draft but cannot go to review. The master resolves the
 * same way for the reviewer's view (sandboxOf) and for the plan (scheduler.ts sandboxOfPlan).
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
 * The limits the task runs with: the spec's asks, clamped to the policy maximum (a spec over it never
 * reaches a worker, but a policy lowered after approval wins), else the per-card defaults.
 */
export function resolveLimits(spec: Pick<TaskSpec, 'cards' | 'limits'>, policy: Policy): ResolvedLimits {
  const cards = spec.cards.count;
  const max = maxLimits(policy, cards);
  return mapLimits((n) => {
    const ask = spec.limits?.[n];
    const value = ask ?? scaled(n, policy.task_limits.per_card[n], cards);
    return Math.min(value, max[n]);
  });
}

/** Error findings for asks above the policy maximum. */
export function checkLimits(spec: TaskSpec, policy: Policy, add: Add): void {
  const max = maxLimits(policy, spec.cards.count);
  for (const name of LIMIT_NAMES) {
    const ask = spec.limits?.[name];
    if (ask === undefined || ask <= max[name]) continue;
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
