import type { ResolvedLimits } from '../../src/contracts/task-limits.js';
import { errorMessage } from '../../src/platform/error-message.js';
import { type CgroupHierarchy, delegateToChildren, type TaskCgroup, v2MountPoint } from './cgroups.js';

/**
 * A container task's own cgroup on a cgroup v2 host (docs/decisions/0028-oom-and-verified-pages.md
 * names it as the next step): the worker makes the task's cgroup below its own, as for a sandboxed task
 * (cgroups.ts, the same limits), hands its controllers to its children, and runs the container with
 * `--cgroup-parent` set to it, so the engine puts the container's cgroup inside. v2's `memory.events`
 * is hierarchical: the task cgroup's `oom_kill` counts a kill in the container's cgroup and outlives the
 * container, so the worker can still tell an OOM kill from a signal after the container is gone (on v2
 * podman, like on v1, does not say so reliably). v1 hosts keep `--oom-kill-disable` and the watch
 * (container-oom.ts): v1 takes one path for every controller, and the worker's differ per controller
 * on hybrid hosts.
 *
 * UNTESTED on a v2 host: this CI host is a v1/v2 hybrid with memory on v1, so only the argv, the paths
 * and the verdict from a `memory.events` read are tested here (docs/security.md "Container tasks").
 * Podman only: `--cgroup-parent` is a cgroupfs path with `--cgroup-manager cgroupfs` (container.ts);
 * docker's systemd driver wants a slice name instead, so docker keeps the container's own counter.
 */

/** The container's parent: the task's cgroup and its path for `--cgroup-parent`. */
export interface ContainerParentCgroup {
  readonly cgroup: TaskCgroup;
  /** The cgroup's path below the v2 mount (`/…/gpu-broker/<execution_id>`), as cgroupfs takes it. */
  readonly path: string;
}

/**
 * The path `--cgroup-parent` takes for the cgroup at host dir `dir`: below the v2 mount point, absolute.
 * Null when `dir` is not below the mount. Pure.
 */
export function cgroupParentPath(dir: string, mountPoint: string): string | null {
  const mount = mountPoint.replace(/\/+$/, '');
  if (!dir.startsWith(`${mount}/`)) return null;
  const path = dir.slice(mount.length);
  return /[\0\n\r:]/.test(path) ? null : path;
}

/** Whether a container task (one with limits) gets its own parent cgroup: podman on a v2 host. */
export function wantsParentCgroup(
  hierarchy: CgroupHierarchy | null | undefined,
  engine: string,
): hierarchy is CgroupHierarchy {
  return hierarchy?.version === 2 && engine === 'podman';
}

/**
 * Makes the task's cgroup (its limits as a sandboxed task's) and readies it to be the container's
 * parent; returns why it could not (the task then does not start: SETUP_FAILED).
 */
export async function makeContainerParent(
  hierarchy: CgroupHierarchy,
  executionId: string,
  limits: ResolvedLimits,
  mountPoint: () => Promise<string | null> = v2MountPoint,
): Promise<ContainerParentCgroup | string> {
  let cgroup: TaskCgroup | null = null;
  try {
    cgroup = await hierarchy.create(executionId, {
      memoryBytes: limits.memory_mib * 1024 * 1024,
      pids: limits.pids,
      cpuWeight: limits.cpu_weight,
    });
    await delegateToChildren(cgroup);
    const mount = await mountPoint();
    const path = mount === null ? null : cgroupParentPath(cgroup.dirs[0] ?? '', mount);
    if (path === null) throw new Error(`${cgroup.dirs[0]} is not below the cgroup v2 mount ${mount}`);
    return { cgroup, path };
  } catch (err) {
    await cgroup?.remove();
    return `cannot make the container's parent cgroup (${hierarchy.describe}): ${errorMessage(err)}`;
  }
}

/** Whether the kernel killed in the task's cgroup (its own or the container's, below): v2's oom_kill. */
export function parentOomProbe(parent: ContainerParentCgroup): () => Promise<boolean> {
  return async () => (await parent.cgroup.oomKills().catch(() => 0)) > 0;
}
