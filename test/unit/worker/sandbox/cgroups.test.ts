import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cgroupLayout, v1Hierarchy, v1Shares, v2Hierarchy } from '../../../../worker/sandbox/cgroups.js';
import { memoryIsV1 } from '../../../../worker/sandbox/mountinfo.js';

// Where task cgroups go (pure, from mountinfo and /proc/self/cgroup), and the v2 write sequence against
// a directory standing in for cgroupfs (this host's v2 has no controllers; v1 is tested for real in
// test/integration/worker/local/executor-limits.test.ts).

const HYBRID = [
  '31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755',
  '32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
  '33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct',
  '35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory',
  '39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids',
].join('\n');
const HYBRID_SELF = ['8:pids:/', '4:memory:/process_api/abc', '1:cpu:/', '0::/'].join('\n');

const UNIFIED = '30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate';
const UNIFIED_SELF = '0::/system.slice/gpu-broker-worker.service\n';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('memoryIsV1', () => {
  it('is true where memory is a v1 controller (a container is then held at its limit) and false on v2', () => {
    expect(memoryIsV1(HYBRID)).toBe(true);
    expect(memoryIsV1(UNIFIED)).toBe(false);
  });
});

describe('cgroupLayout', () => {
  it('finds each v1 controller below the worker’s own cgroup on a hybrid host', () => {
    expect(cgroupLayout(HYBRID, HYBRID_SELF, null)).toEqual({
      version: 1,
      memory: '/sys/fs/cgroup/memory/process_api/abc',
      pids: '/sys/fs/cgroup/pids',
      cpu: '/sys/fs/cgroup/cpu',
    });
  });

  it('prefers v2 when it is mounted with memory and pids, below the worker’s own cgroup', () => {
    expect(cgroupLayout(UNIFIED, UNIFIED_SELF, 'cpuset cpu io memory hugetlb pids rdma')).toEqual({
      version: 2,
      parent: '/sys/fs/cgroup/system.slice/gpu-broker-worker.service',
    });
  });

  it('has none without memory and pids (a v2 mount whose controllers are all bound to v1, no v1 pids)', () => {
    expect(cgroupLayout(UNIFIED, UNIFIED_SELF, '')).toBeNull();
    expect(cgroupLayout(HYBRID.split('\n').slice(0, 4).join('\n'), HYBRID_SELF, null)).toBeNull();
  });

  it('uses the mount itself when the worker’s path is not below its root (a container without cgroupns)', () => {
    const mountinfo = '35 31 0:32 /docker/xyz /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n'.concat(
      '39 31 0:36 /docker/xyz /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n',
      '32 31 0:29 /docker/xyz /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu',
    );
    const layout = cgroupLayout(mountinfo, '4:memory:/other\n8:pids:/docker/xyz/sub\n1:cpu:/', null);
    expect(layout).toEqual({
      version: 1,
      memory: '/sys/fs/cgroup/memory',
      pids: '/sys/fs/cgroup/pids/sub',
      cpu: '/sys/fs/cgroup/cpu',
    });
  });
});

describe('v2Hierarchy', () => {
  it('enables the controllers, makes the task cgroup and writes its limits', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'cgroup-v2-'));
    dirs.push(parent);
    for (const f of ['cgroup.subtree_control', 'cgroup.procs']) writeFileSync(join(parent, f), '');
    const h = v2Hierarchy(parent);
    expect(h.version).toBe(2);
    const cg = await h.create('exec-1', { memoryBytes: 256 * 1024 * 1024, pids: 100, cpuWeight: 300 });
    const dir = join(parent, 'gpu-broker', 'exec-1');
    expect(cg.dirs).toEqual([dir]);
    expect(readFileSync(join(parent, 'cgroup.subtree_control'), 'utf8')).toBe('+memory +pids +cpu');
    expect(readFileSync(join(parent, 'gpu-broker', 'cgroup.subtree_control'), 'utf8')).toBe(
      '+memory +pids +cpu',
    );
    // No CPU quota asked: none written (cpu.max absent), none read back.
    expect(await cg.readBack()).toEqual({
      memoryBytes: 256 * 1024 * 1024,
      pids: 100,
      cpuWeight: null,
      cpus: null,
    });
    await cg.add(1234);
    expect(readFileSync(join(dir, 'cgroup.procs'), 'utf8')).toBe('1234');
    // The kernel's counter, as memory.events has it.
    writeFileSync(join(dir, 'memory.events'), 'low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n');
    expect(await cg.oomKills()).toBe(1);
  });

  it('writes a CPU quota as cpu.max (quota and period) and reads it back as CPUs', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'cgroup-v2-'));
    dirs.push(parent);
    for (const f of ['cgroup.subtree_control', 'cgroup.procs']) writeFileSync(join(parent, f), '');
    const cg = await v2Hierarchy(parent).create('exec-2', {
      memoryBytes: 1024,
      pids: 10,
      cpuWeight: 100,
      cpus: 3,
    });
    expect(readFileSync(join(parent, 'gpu-broker', 'exec-2', 'cpu.max'), 'utf8')).toBe('300000 100000');
    expect((await cg.readBack()).cpus).toBe(3);
    // The kernel's "no quota" reads as none.
    writeFileSync(join(parent, 'gpu-broker', 'exec-2', 'cpu.max'), 'max 100000\n');
    expect((await cg.readBack()).cpus).toBeNull();
  });

  it('refuses to reuse a task cgroup that already exists', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'cgroup-v2-'));
    dirs.push(parent);
    mkdirSync(join(parent, 'gpu-broker', 'exec-1'), { recursive: true });
    await expect(
      v2Hierarchy(parent).create('exec-1', { memoryBytes: 1, pids: 1, cpuWeight: 1 }),
    ).rejects.toThrow(/EEXIST/);
  });
});

describe('v1Shares', () => {
  it('maps cpu.weight onto cpu.shares, 100 ↦ 1024, within the kernel’s range', () => {
    expect(v1Shares(100)).toBe(1024);
    expect(v1Shares(50)).toBe(512);
    expect(v1Shares(1)).toBe(10);
    expect(v1Shares(10000)).toBe(102400);
  });
});

describe('v1Hierarchy', () => {
  it('writes a CPU quota as cpu.cfs_quota_us over cpu.cfs_period_us and reads it back as CPUs', async () => {
    const root = mkdtempSync(join(tmpdir(), 'cgroup-v1-'));
    dirs.push(root);
    const parents = { memory: join(root, 'memory'), pids: join(root, 'pids'), cpu: join(root, 'cpu') };
    for (const p of Object.values(parents)) mkdirSync(p, { recursive: true });
    const cg = await v1Hierarchy(parents).create('exec-1', {
      memoryBytes: 1024,
      pids: 10,
      cpuWeight: 100,
      cpus: 2,
    });
    const cpuDir = join(parents.cpu, 'gpu-broker', 'exec-1');
    expect(readFileSync(join(cpuDir, 'cpu.cfs_period_us'), 'utf8')).toBe('100000');
    expect(readFileSync(join(cpuDir, 'cpu.cfs_quota_us'), 'utf8')).toBe('200000');
    expect((await cg.readBack()).cpus).toBe(2);
  });
});
