import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ResolvedLimits } from '../../../../src/contracts/task-limits.js';
import { v1Hierarchy, v2Hierarchy } from '../../../../worker/sandbox/cgroups.js';
import { type ContainerRequest, containerArgs } from '../../../../worker/sandbox/container.js';
import {
  cgroupParentPath,
  makeContainerParent,
  parentOomProbe,
  wantsParentCgroup,
} from '../../../../worker/sandbox/container-cgroup.js';
import { containerTaskLimits } from '../../../../worker/sandbox/limits.js';

/**
 * Container OOM on cgroup v2 (docs/performance.md "Noisy neighbours"): the container runs below the task's own cgroup
 * (`--cgroup-parent`), whose hierarchical `memory.events` oom_kill decides OUT_OF_MEMORY after the
 * container is gone. This host's memory is cgroup v1, so the v2 hierarchy here is a directory of plain
 * files standing in for cgroupfs (as in cgroups.test.ts): the argv, the paths and the verdict from a
 * `memory.events` read are tested, not a kernel's kill (docs/security.md says so).
 */
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const limits: ResolvedLimits = {
  memory_mib: 512,
  pids: 300,
  cpu_weight: 100,
  tmp_mib: 64,
  shm_mib: 64,
  disk_mib: 1024,
};

const request: ContainerRequest = {
  engine: 'podman',
  name: 'gpu-broker-exec-1',
  executionId: 'exec-1',
  image: 'a'.repeat(64),
  taskDir: '/data/executions/exec-1/task',
  envFile: '/data/executions/exec-1/container.env',
  inlineEnv: [],
  devices: { kind: 'nodes', nodes: [] },
  network: 'none',
  user: { uid: 2_000_000_000, gid: 2_000_000_000 },
  limits,
  init: true,
  argv: ['/bin/sh', '-c', 'echo hi'],
};

/** A stand-in v2 mount with the worker's cgroup at `<mount>/worker.service`. */
function fakeV2(): { mount: string; parent: string } {
  const mount = mkdtempSync(join(tmpdir(), 'cgroup2-'));
  dirs.push(mount);
  const parent = join(mount, 'worker.service');
  mkdirSync(parent);
  for (const f of ['cgroup.subtree_control', 'cgroup.procs']) writeFileSync(join(parent, f), '');
  return { mount, parent };
}

describe('the container below its task cgroup on cgroup v2', () => {
  it('podman gets --cgroup-manager cgroupfs before run and --cgroup-parent with the path; no hold on OOM', () => {
    const args = containerArgs({ ...request, cgroupParent: '/worker.service/gpu-broker/exec-1' });
    expect(args.slice(0, 3)).toEqual(['--cgroup-manager', 'cgroupfs', 'run']);
    expect(args[args.indexOf('--cgroup-parent') + 1]).toBe('/worker.service/gpu-broker/exec-1');
    expect(args).not.toContain('--oom-kill-disable');
    // The image and the task's argv still come last.
    expect(args.slice(-4)).toEqual(['a'.repeat(64), '/bin/sh', '-c', 'echo hi']);
    // Without a parent nothing changes.
    expect(containerArgs(request)[0]).toBe('run');
    expect(containerArgs(request)).not.toContain('--cgroup-parent');
    // docker takes the flag as its daemon's driver does; no podman-only global flag.
    const docker = containerArgs({ ...request, engine: 'docker', cgroupParent: '/p' });
    expect(docker[0]).toBe('run');
    expect(docker).toContain('--cgroup-parent');
  });

  it('the path is the cgroup dir below the v2 mount; anything else is refused', () => {
    expect(cgroupParentPath('/sys/fs/cgroup/system.slice/w.service/gpu-broker/e1', '/sys/fs/cgroup')).toBe(
      '/system.slice/w.service/gpu-broker/e1',
    );
    expect(cgroupParentPath('/sys/fs/cgroup/a', '/sys/fs/cgroup/')).toBe('/a');
    expect(cgroupParentPath('/sys/fs/cgroupX/a', '/sys/fs/cgroup')).toBeNull();
    expect(cgroupParentPath('/sys/fs/cgroup', '/sys/fs/cgroup')).toBeNull();
    expect(cgroupParentPath('/sys/fs/cgroup/a:b', '/sys/fs/cgroup')).toBeNull();
    expect(cgroupParentPath('/sys/fs/cgroup/a\nb', '/sys/fs/cgroup')).toBeNull();
  });

  it('only podman on a v2 hierarchy gets a parent', () => {
    const { parent } = fakeV2();
    expect(wantsParentCgroup(v2Hierarchy(parent), 'podman')).toBe(true);
    expect(wantsParentCgroup(v2Hierarchy(parent), 'docker')).toBe(false);
    expect(wantsParentCgroup(v1Hierarchy({ memory: '/m', pids: '/p', cpu: '/c' }), 'podman')).toBe(false);
    expect(wantsParentCgroup(null, 'podman')).toBe(false);
    expect(wantsParentCgroup(undefined, 'podman')).toBe(false);
  });

  it('makes the task cgroup with its limits, hands its controllers down, and names it by its path', async () => {
    const { mount, parent } = fakeV2();
    const made = await makeContainerParent(v2Hierarchy(parent), 'exec-1', limits, async () => mount);
    if (typeof made === 'string') throw new Error(made);
    const dir = join(parent, 'gpu-broker', 'exec-1');
    expect(made.cgroup.dirs).toEqual([dir]);
    expect(made.path).toBe('/worker.service/gpu-broker/exec-1');
    expect(readFileSync(join(dir, 'memory.max'), 'utf8')).toBe(String(512 * 1024 * 1024));
    expect(readFileSync(join(dir, 'cgroup.subtree_control'), 'utf8')).toBe('+memory +pids +cpu');
  });

  it('a cgroup outside the v2 mount is refused (the task does not start: SETUP_FAILED)', async () => {
    const { parent } = fakeV2();
    const made = await makeContainerParent(v2Hierarchy(parent), 'exec-2', limits, async () => '/elsewhere');
    expect(made).toMatch(/cannot make the container's parent cgroup.*not below the cgroup v2 mount/);
  });

  it("the verdict: OUT_OF_MEMORY from the task cgroup's memory.events after the container is gone", async () => {
    const { mount, parent } = fakeV2();
    const made = await makeContainerParent(v2Hierarchy(parent), 'exec-3', limits, async () => mount);
    if (typeof made === 'string') throw new Error(made);
    const events = join(made.cgroup.dirs[0]!, 'memory.events');
    const taskDir = mkdtempSync(join(tmpdir(), 'ctask-'));
    dirs.push(taskDir);
    const box = () =>
      containerTaskLimits({
        limits,
        taskDir,
        engine: 'podman',
        underOom: parentOomProbe(made),
        parent: { cgroup: made.cgroup, describe: 'v2' },
      });
    // No kill counted (or no file yet): the exit stands as it is (a signal death stays one).
    expect(await box().breach()).toBeNull();
    writeFileSync(events, 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n');
    expect(await box().breach()).toBeNull();
    expect(await parentOomProbe(made)()).toBe(false);
    // The kernel killed in the container's cgroup: v2 counts it in the parent's memory.events too.
    writeFileSync(events, 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n');
    expect(await parentOomProbe(made)()).toBe(true);
    const limitsAfter = box();
    expect(await limitsAfter.breach()).toEqual({
      reason: 'OUT_OF_MEMORY',
      detail:
        'the task went over its memory limit of 512 MiB (podman --memory, in its own v2 cgroup) and the kernel killed it',
    });
    expect(limitsAfter.enforced().memory_mib?.by).toContain("below the task's own v2 cgroup");
    await limitsAfter.release();
    expect(existsSync(taskDir)).toBe(false);
  });
});
