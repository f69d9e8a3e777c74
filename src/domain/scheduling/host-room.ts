import {
  DEFAULT_HOST_RESERVE,
  DEFAULT_LIMITS_PER_CARD,
  DEFAULT_MAX_LIMITS_PER_CARD,
} from '../../contracts/task-limits.js';
import { type HostAllowance, hostAllowance, resolveOne } from '../policy/task-limits.js';
import { waitingForHostRoom } from './reasons.js';
import type { Requirement } from './requirement.js';
import type { Slot } from './slots.js';
import type { SchedulingConfig, WaitReason } from './types.js';

/**
 * The host room a task takes and the scheduler counts per worker: memory and task-dir disk (every task
 * takes its resolved share), and CPUs (only a task that asks for `limits.cpus` takes any).
 */
export type RoomName = 'memory_mib' | 'disk_mib' | 'cpus';
export const ROOMS: readonly RoomName[] = ['memory_mib', 'disk_mib', 'cpus'];

/** What is left of a host's room, and what a task would take of it. */
export interface RoomView {
  readonly left: Readonly<Record<RoomName, number>>;
  readonly need: Readonly<Record<RoomName, number>>;
}

/**
 * The room of each known host in one scheduling pass (docs/operations.md "Task limits"): what its host
 * can give less what running tasks were promised, less this pass's grants as they are made. Room left
 * only shrinks within a pass, so a shape refused once stays refused (pool.ts `unplaceable`). A worker
 * whose host is not known counts nothing and rules nothing out.
 */
export class HostRooms {
  /** Per worker whose host is known: what its host can give, and the room no task was promised yet. */
  private readonly rooms = new Map<Slot, { allowance: HostAllowance; left: Record<RoomName, number> }>();
  /** The memory and disk per card a task asking for none is given (before its host's share). */
  private readonly perCard: SchedulingConfig['room_per_card'] & object;
  /** Requirements that found cards but not room on a worker this pass: which room, where, need and left. */
  private readonly short = new Map<
    string,
    { name: RoomName; worker_id: string; need: number; left: number }
  >();

  constructor(slots: readonly Slot[], config: Pick<SchedulingConfig, 'host_reserve' | 'room_per_card'>) {
    this.perCard = config.room_per_card ?? {
      memory_mib: {
        default_mib: DEFAULT_LIMITS_PER_CARD.memory_mib,
        max_mib: DEFAULT_MAX_LIMITS_PER_CARD.memory_mib,
      },
      disk_mib: {
        default_mib: DEFAULT_LIMITS_PER_CARD.disk_mib,
        max_mib: DEFAULT_MAX_LIMITS_PER_CARD.disk_mib,
      },
    };
    for (const slot of slots) {
      const host = slot.worker.host;
      if (host == null) continue;
      const allowance = hostAllowance(
        host,
        slot.worker.cards.length,
        config.host_reserve ?? DEFAULT_HOST_RESERVE,
      );
      const left = {
        memory_mib: allowance.total.memory_mib - (slot.worker.memory_committed_mib ?? 0),
        disk_mib: allowance.total.disk_mib - (slot.worker.disk_committed_mib ?? 0),
        cpus: allowance.total.cpus - (slot.worker.cpus_committed ?? 0),
      };
      this.rooms.set(slot, { allowance, left });
    }
  }

  /**
   * What `req` would be given of `slot`'s host memory and disk, and the CPUs it asks for; null where its
   * host is not known (then nothing is counted there).
   */
  need(slot: Slot, req: Requirement): Record<RoomName, number> | null {
    const host = this.rooms.get(slot);
    if (host === undefined) return null;
    const need = (name: 'memory_mib' | 'disk_mib') => {
      const { default_mib, max_mib } = this.perCard[name];
      return resolveOne(name, req.hostAsks[name], req.need, default_mib, max_mib, host.allowance);
    };
    return { memory_mib: need('memory_mib'), disk_mib: need('disk_mib'), cpus: req.hostAsks.cpus ?? 0 };
  }

  /**
   * Whether `req` fits `slot`'s host: its need there (null: host not known, nothing counted), or false
   * when one room is short (noted for the wait reason: the first such place of the pass).
   */
  fits(slot: Slot, req: Requirement): Record<RoomName, number> | null | false {
    const need = this.need(slot, req);
    if (need === null) return null;
    const left = this.rooms.get(slot)!.left;
    for (const name of ROOMS) {
      if (need[name] <= left[name]) continue;
      if (!this.short.has(req.key))
        this.short.set(req.key, {
          name,
          worker_id: slot.worker.worker_id,
          need: need[name],
          left: left[name],
        });
      return false;
    }
    return need;
  }

  /** A grant on `slot` takes `need` (from `fits`) of its host's room. */
  take(slot: Slot, need: Record<RoomName, number> | null): void {
    if (need === null) return;
    const left = this.rooms.get(slot)!.left;
    for (const name of ROOMS) left[name] -= need[name];
  }

  /** The wait of a requirement that found cards but not room this pass, or null. */
  shortReason(key: string): WaitReason | null {
    const short = this.short.get(key);
    return short === undefined
      ? null
      : waitingForHostRoom(short.name, short.worker_id, short.need, short.left);
  }

  /** What is left on `slot`'s host and what `req` would take (reclaim.ts); null: host not known. */
  view(slot: Slot, req: Requirement): RoomView | null {
    const host = this.rooms.get(slot);
    const need = this.need(slot, req);
    return host === undefined || need === null ? null : { left: { ...host.left }, need };
  }
}
