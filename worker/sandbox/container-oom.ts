import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ContainerSetup } from './container-probe.js';
import { engineOutput } from './container-probe.js';
import { below, parseMountinfo, parseSelfCgroup } from './mountinfo.js';

/**
 * Whether a task's container is at its memory limit (docs/performance.md "Noisy neighbours"): the engine's own report of an OOM kill
 * (`State.OOMKilled`) is not to be trusted everywhere (podman 4.3 with runc on a cgroup v1 memory
 * controller reports false for a container the kernel killed at its limit), and the container's cgroup
 * is gone once it exited. So, where memory is a cgroup v1 controller, the container runs with
 * `--oom-kill-disable` (container.ts): at its limit the kernel holds it (`under_oom 1`) instead of
 * killing a process of it, and the worker's watch (sandbox/limits.ts) sees that, ends the container and
 * reports OUT_OF_MEMORY. On cgroup v2 the watch reads the container's `memory.events` oom_kill while it
 * runs (a kill of a process other than the last one is seen; docs/security.md says what is not).
 */

/** Where a running container's memory cgroup is; found once, then reused. */
export function containerOomProbe(setup: ContainerSetup, name: string): () => Promise<boolean> {
  let found: { version: 1 | 2; dir: string } | null = null;
  return async () => {
    if (found === null) {
      const out = await engineOutput(setup, ['inspect', '--format', '{{.State.Pid}}', name], 10_000);
      const pid = Number(out?.trim());
      if (!Number.isSafeInteger(pid) || pid <= 0) return false;
      found = await memoryCgroupOf(pid);
      if (found === null) return false;
    }
    return underOom(found);
  };
}

/** The host dir of `pid`'s memory cgroup and its version; null when it cannot be read. */
export async function memoryCgroupOf(pid: number): Promise<{ version: 1 | 2; dir: string } | null> {
  let mounts: ReturnType<typeof parseMountinfo>;
  let own: Map<string, string>;
  try {
    mounts = parseMountinfo(await readFile('/proc/self/mountinfo', 'utf8'));
    own = parseSelfCgroup(await readFile(`/proc/${pid}/cgroup`, 'utf8'));
  } catch {
    return null;
  }
  const v1 = mounts.find((m) => m.fstype === 'cgroup' && m.superOptions.split(',').includes('memory'));
  const v1Path = [...own.entries()].find(([k]) => k.split(',').includes('memory'))?.[1];
  if (v1 !== undefined && v1Path !== undefined) return { version: 1, dir: below(v1, v1Path) };
  const v2 = mounts.find((m) => m.fstype === 'cgroup2');
  const v2Path = own.get('');
  return v2 === undefined || v2Path === undefined ? null : { version: 2, dir: below(v2, v2Path) };
}

/** v1: held at the limit (`under_oom 1`) or a kill counted; v2: a kill counted. */
async function underOom(cg: { version: 1 | 2; dir: string }): Promise<boolean> {
  try {
    if (cg.version === 1) {
      const text = await readFile(join(cg.dir, 'memory.oom_control'), 'utf8');
      return /^under_oom 1$/m.test(text) || /^oom_kill [1-9]/m.test(text);
    }
    return /^oom_kill [1-9]/m.test(await readFile(join(cg.dir, 'memory.events'), 'utf8'));
  } catch {
    return false;
  }
}
