import { DEFAULT_HOST_RESERVE, type HostReserve } from '../../contracts/task-limits.js';
import { hostAllowance, hostShortfall } from '../policy/task-limits.js';
import { poolShapeFits } from './nodes.js';
import {
  cordoned,
  describeNeed,
  limitsExceedHost,
  mountMissing,
  multiNodeNeedsSlurm,
  noContainerEngine,
  noMatchingWorker,
  unknownPinnedWorker,
  workerOffline,
  workersOffline,
  workerUnisolated,
} from './reasons.js';
import type { Requirement } from './requirement.js';
import { fitsShape, matches, type Slot } from './slots.js';
import type { WaitReason } from './types.js';

/**
 * The feasibility chain of a requirement, once per pass: which workers could ever hold it (pin, capacity,
 * Slurm for multi-node, container engine, mounts, the host's size, isolation), which of them are usable now, and on which
 * enough uncordoned cards match. The first link that leaves no worker names the wait reason.
 */

/** What never changes for a requirement within a pass: where it may run, or why it never can. */
export interface RequirementView {
  req: Requirement;
  /** Why it cannot start this pass whatever else happens, or null. */
  blocked: WaitReason | null;
  /** Usable workers, by id, with at least `need` matching uncordoned cards. */
  slots: Slot[];
  /** Matching AVAILABLE cards on `slots` at the start of the pass. */
  eligible: number;
}

/** The pass's workers as the feasibility chain reads them. */
export interface FeasibilityInput {
  /** Every slot of the pass, by worker id. */
  readonly slots: readonly Slot[];
  readonly slotById: ReadonlyMap<string, Slot>;
  /** `policy.require_isolation`: unisolated workers take no task. */
  readonly requireIsolation: boolean;
  /** `policy.task_limits.host_reserve`; absent: the policy's default. */
  readonly hostReserve?: HostReserve | undefined;
}

/** Walks the chain for `req`; see the file comment. */
export function buildView(req: Requirement, input: FeasibilityInput): RequirementView {
  const blockedView = (blocked: WaitReason): RequirementView => ({ req, blocked, slots: [], eligible: 0 });
  let allowed: readonly Slot[] = input.slots;
  if (req.worker !== null) {
    const pinned = input.slotById.get(req.worker);
    if (pinned === undefined) return blockedView(unknownPinnedWorker(req.need, req.worker));
    allowed = [pinned];
  }
  const capable = capableSlots(req, allowed);
  if (!Array.isArray(capable)) return blockedView(capable);
  const runnable = runnableSlots(
    req,
    capable,
    input.requireIsolation,
    input.hostReserve ?? DEFAULT_HOST_RESERVE,
  );
  if (!Array.isArray(runnable)) return blockedView(runnable);
  const usable = runnable.filter((s) => s.usable);
  if (usable.length === 0) {
    if (req.worker !== null) {
      const w = (runnable[0] as Slot).worker;
      return blockedView(workerOffline(w.worker_id, w.online && w.draining));
    }
    const offline = runnable.filter((s) => !s.worker.online).length;
    return blockedView(workersOffline(req.need, offline, runnable.length - offline));
  }
  let uncordoned = 0;
  const slots: Slot[] = [];
  let eligible = 0;
  for (const slot of usable) {
    let n = 0;
    // Cards reserved for another run (or, for a run's task, every card outside its reservation)
    // count as cordoned here: `matches` leaves them out.
    for (const card of slot.cards) if (!card.cordoned && matches(card, req)) n++;
    uncordoned = Math.max(uncordoned, n);
    if (n < req.need) continue;
    slots.push(slot);
    for (const card of slot.free) if (matches(card, req)) eligible++;
  }
  if (slots.length === 0) return blockedView(cordoned(req.need, uncordoned));
  return { req, blocked: null, slots, eligible };
}

/**
 * The slots that could ever hold `req`, or why none can. Capacity counts cards in any state, reserved or
 * not: a worker that could never hold the task rules itself out.
 */
function capableSlots(req: Requirement, allowed: readonly Slot[]): Slot[] | WaitReason {
  let largest = 0;
  const capable: Slot[] = [];
  for (const slot of allowed) {
    let n = 0;
    for (const card of slot.cards) if (fitsShape(card, req)) n++;
    // A Slurm pool must also have the nodes the job's shape needs (Slurm would refuse it at sbatch).
    if (!poolShapeFits(slot.worker, req.need, req.perNode)) n = Math.min(n, req.need - 1);
    largest = Math.max(largest, n);
    if (n >= req.need) capable.push(slot);
  }
  if (largest < req.need) {
    const needText = describeNeed(req.need, req.model, req.minMemoryMib) + migNeed(req);
    return noMatchingWorker(needText, req.need, largest, req.worker);
  }
  return capable;
}

/** What a task asks of MIG in words, after describeNeed's ("1 card (MIG 1g.10gb slices)"). */
function migNeed(req: Requirement): string {
  if (req.mig === 'never') return '';
  return req.mig === 'allowed' ? ' (a MIG slice may do)' : ` (MIG ${req.mig.profile} slices)`;
}

/**
 * Of the capable slots, those whose way of running tasks can take `req`, or why none can. How a worker
 * runs tasks rules it out before its liveness does: waiting for it to come back would not help.
 */
function runnableSlots(
  req: Requirement,
  capable: Slot[],
  requireIsolation: boolean,
  reserve: HostReserve,
): Slot[] | WaitReason {
  let runnable = capable;
  if (req.perNode !== null) {
    runnable = capable.filter((s) => s.worker.backend === 'slurm');
    if (runnable.length === 0) return multiNodeNeedsSlurm(req.need, req.perNode, capable.length, req.worker);
  }
  if (req.container) {
    runnable = capable.filter((s) => s.worker.container_engine !== null);
    if (runnable.length === 0) return noContainerEngine(req.need, capable.length, req.worker);
  }
  if (req.mounts.length > 0) {
    runnable = runnable.filter((s) => req.mounts.every((m) => s.worker.mounts?.includes(m)));
    if (runnable.length === 0) return mountMissing(req.need, req.mounts, req.worker);
  }
  if (Object.keys(req.hostAsks).length > 0) {
    const fit = hostFit(req, runnable, reserve);
    if (!Array.isArray(fit)) return fit;
    runnable = fit;
  }
  if (requireIsolation) {
    const isolated = runnable.filter((s) => s.worker.isolation !== 'none');
    if (isolated.length === 0) return workerUnisolated(req.need, runnable.length, req.worker);
    runnable = isolated;
  }
  return runnable;
}

/**
 * Of `slots`, those whose host can give what the spec asks of memory, /tmp, /dev/shm and disk (a worker
 * whose host is not known rules nothing out), or the reason naming the largest host's shortfall.
 */
function hostFit(req: Requirement, slots: Slot[], reserve: HostReserve): Slot[] | WaitReason {
  const fit: Slot[] = [];
  let best: { short: { name: string; ask: number; most: number }; basis: string } | null = null;
  for (const slot of slots) {
    const host = slot.worker.host;
    if (host == null) {
      fit.push(slot);
      continue;
    }
    const allowance = hostAllowance(host, slot.worker.cards.length, reserve);
    const short = hostShortfall(req.hostAsks, allowance);
    if (short === null) fit.push(slot);
    else if (best === null || short.most > best.short.most) best = { short, basis: allowance.basis };
  }
  if (fit.length > 0 || best === null) return fit;
  return limitsExceedHost(req.need, best.short, best.basis, req.worker);
}
