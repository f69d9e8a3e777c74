import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ContainerRequest } from '../../../../worker/sandbox/container.js';
import {
  cardDevices,
  containerArgs,
  containerName,
  containersConf,
  envFileText,
  hasNvidiaCdi,
  imageRunRef,
  parseContainerEngine,
  probeContainerEngine,
} from '../../../../worker/sandbox/container.js';

// The container's argv and the choices behind it (pure), and the engine probe against this machine's
// real podman.

const request: ContainerRequest = {
  engine: 'podman',
  name: 'gpu-broker-exec-1',
  executionId: 'exec-1',
  image: 'a'.repeat(64),
  taskDir: '/data/executions/exec-1/task',
  envFile: '/data/executions/exec-1/container.env',
  inlineEnv: [],
  devices: { kind: 'nodes', nodes: [{ host: '/data/devices/nvidia3', inside: '/dev/nvidia3' }] },
  network: 'none',
  user: { uid: 2_000_000_000, gid: 2_000_000_000 },
  limits: null,
  init: true,
  argv: ['/bin/sh', '-c', 'echo hi'],
};

/** The value after each occurrence of `flag`. */
function values(args: string[], flag: string): string[] {
  return args.flatMap((a, i) => (a === flag ? [args[i + 1] ?? ''] : []));
}

describe('containerArgs', () => {
  it("passes the task's limits through the engine's own flags (docs/performance.md, noisy neighbours)", () => {
    const limits = {
      memory_mib: 2048,
      pids: 300,
      cpu_weight: 200,
      tmp_mib: 64,
      shm_mib: 128,
      disk_mib: 1024,
    };
    const args = containerArgs({ ...request, limits });
    expect(values(args, '--memory')).toEqual(['2048m']);
    // No swap beyond the memory limit.
    expect(values(args, '--memory-swap')).toEqual(['2048m']);
    expect(values(args, '--pids-limit')).toEqual(['300']);
    expect(values(args, '--cpu-shares')).toEqual(['2048']);
    expect(values(args, '--shm-size')).toEqual(['128m']);
    expect(values(args, '--tmpfs')).toEqual([
      '/tmp:rw,nosuid,nodev,mode=1777,size=64m',
      '/var/tmp:rw,nosuid,nodev,mode=1777,size=64m',
    ]);
    // All before the image: after it they would be the task's argv.
    expect(args.indexOf('--memory')).toBeLessThan(args.indexOf(request.image));
  });

  it('holds a container at its memory limit only where the worker watches it (cgroup v1 memory)', () => {
    const limits = { memory_mib: 64, pids: 64, cpu_weight: 100, tmp_mib: 8, shm_mib: 8, disk_mib: 16 };
    const held = containerArgs({ ...request, limits, holdOnOom: true });
    expect(held).toContain('--oom-kill-disable');
    expect(held.indexOf('--oom-kill-disable')).toBeLessThan(held.indexOf(request.image));
    expect(containerArgs({ ...request, limits })).not.toContain('--oom-kill-disable');
    // Without a memory limit nothing would end a held container.
    expect(containerArgs({ ...request, limits: null, holdOnOom: true })).not.toContain('--oom-kill-disable');
  });

  it('runs the image with no network, read-only, unprivileged, never pulling, the argv last', () => {
    const args = containerArgs(request);
    expect(args.slice(0, 3)).toEqual(['run', '--rm', '--pull=never']);
    expect(values(args, '--network')).toEqual(['none']);
    expect(args).toContain('--read-only');
    expect(args).toContain('--cap-drop=all');
    // The host's loop devices (each task dir's names its execution) and ext4 counters masked (docs/security.md "The task sandbox").
    expect(values(args, '--security-opt')).toEqual([
      'mask=/sys/devices/virtual/block:/sys/fs/ext4',
      'no-new-privileges',
    ]);
    expect(values(containerArgs({ ...request, engine: 'docker' }), '--tmpfs').slice(2)).toEqual([
      '/sys/devices/virtual/block:ro,nosuid,nodev,noexec,size=4k',
      '/sys/fs/ext4:ro,nosuid,nodev,noexec,size=4k',
    ]);
    expect(values(args, '--user')).toEqual(['2000000000:2000000000']);
    expect(values(args, '--pids-limit')).toEqual(['4096']);
    expect(values(args, '--tmpfs')).toEqual([
      '/tmp:rw,nosuid,nodev,mode=1777',
      '/var/tmp:rw,nosuid,nodev,mode=1777',
    ]);
    expect(values(args, '--volume')).toEqual(['/data/executions/exec-1/task:/task:rw']);
    expect(values(args, '--workdir')).toEqual(['/task']);
    expect(values(args, '--name')).toEqual(['gpu-broker-exec-1']);
    expect(values(args, '--label')).toEqual(['gpu-broker.execution=exec-1']);
    expect(values(args, '--env-file')).toEqual([request.envFile]);
    expect(args).toContain('--init');
    expect(args.slice(-4)).toEqual(['a'.repeat(64), '/bin/sh', '-c', 'echo hi']);
  });

  it('gives podman a backstop time limit that holds without the worker (docs/security.md "The task sandbox"); docker has none', () => {
    const podman = containerArgs({ ...request, engine: 'podman', backstopSeconds: 180 });
    expect(values(podman, '--timeout')).toEqual(['180']);
    expect(podman.indexOf('--timeout')).toBeLessThan(podman.indexOf(request.image));
    expect(containerArgs({ ...request, engine: 'docker', backstopSeconds: 180 })).not.toContain('--timeout');
    expect(containerArgs({ ...request, engine: 'podman' })).not.toContain('--timeout');
  });

  it('keeps the host network only when the spec says so', () => {
    expect(values(containerArgs({ ...request, network: 'host' }), '--network')).toEqual(['host']);
  });

  it('passes only the given device nodes, or CDI names', () => {
    expect(values(containerArgs(request), '--device')).toEqual(['/data/devices/nvidia3:/dev/nvidia3:rw']);
    const cdi = containerArgs({ ...request, devices: { kind: 'cdi', names: ['nvidia.com/gpu=3'] } });
    expect(values(cdi, '--device')).toEqual(['nvidia.com/gpu=3']);
  });

  it('puts only values with a line break on the command line', () => {
    const env = envFileText({ A: 'x=y', B: ' lead #', C: 'two\nlines' });
    expect(env.text).toBe('A=x=y\nB= lead #\n');
    expect(env.inline).toEqual([['C', 'two\nlines']]);
    const args = containerArgs({ ...request, inlineEnv: env.inline });
    expect(values(args, '--env')).toEqual(['C=two\nlines']);
  });

  it('names the container after the execution', () => {
    expect(containerName('exec-1')).toBe('gpu-broker-exec-1');
  });
});

describe('cardDevices', () => {
  const nodes = () => [{ host: '/dev/nvidia1', inside: '/dev/nvidia1' }];
  it('uses CDI names on an NVIDIA host with CDI specs, device nodes otherwise', () => {
    expect(cardDevices('nvidia', true, [1, 4], nodes)).toEqual({
      kind: 'cdi',
      names: ['nvidia.com/gpu=1', 'nvidia.com/gpu=4'],
    });
    expect(cardDevices('nvidia', false, [1], nodes)).toEqual({ kind: 'nodes', nodes: nodes() });
    expect(cardDevices('hy', true, [1], nodes)).toEqual({ kind: 'nodes', nodes: nodes() });
    expect(cardDevices('sim', true, [1], nodes)).toEqual({ kind: 'nodes', nodes: nodes() });
  });

  it("passes a MIG slice as its nodes even with CDI: the whole card's CDI name would hand over every slice", () => {
    // 264 = card 0, GPU instance 1, compute instance 0 (ADR 0046).
    expect(cardDevices('nvidia', true, [264], nodes)).toEqual({ kind: 'nodes', nodes: nodes() });
  });

  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  it('detects NVIDIA CDI specs by their kind', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cdi-'));
    dirs.push(dir);
    const etc = join(dir, 'etc');
    const run = join(dir, 'run');
    mkdirSync(etc);
    mkdirSync(run);
    expect(hasNvidiaCdi([etc, run, join(dir, 'missing')])).toBe(false);
    writeFileSync(join(etc, 'other.yaml'), 'cdiVersion: 0.5.0\nkind: vendor.com/fpga\n');
    expect(hasNvidiaCdi([etc, run])).toBe(false);
    writeFileSync(join(run, 'nvidia.yaml'), 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n');
    expect(hasNvidiaCdi([etc, run])).toBe(true);
  });
});

describe('imageRunRef', () => {
  const d1 = `sha256:${'1'.repeat(64)}`;
  const d2 = `sha256:${'2'.repeat(64)}`;
  const id = 'f'.repeat(64);
  const where = { worker: 'w1', engine: 'podman' as const };
  it('refuses a missing image, telling the operator to load it', () => {
    const r = imageRunRef('localhost/x:1', undefined, null, where);
    expect(r).toEqual({
      ok: false,
      error:
        'image localhost/x:1 is not present on worker w1: podman pull/load it there (the worker never pulls)',
    });
  });
  it('runs the local image id when the pinned and the required digests match', () => {
    const local = { id, digests: [d1] };
    expect(imageRunRef(`localhost/x@${d1}`, undefined, local, where)).toEqual({ ok: true, ref: id });
    expect(imageRunRef('localhost/x:1', d1, local, where)).toEqual({ ok: true, ref: id });
    expect(imageRunRef('localhost/x:1', undefined, local, where)).toEqual({ ok: true, ref: id });
  });
  it('refuses a digest that differs, naming the image', () => {
    const local = { id, digests: [d1] };
    const byPlan = imageRunRef('localhost/x:1', d2, local, where);
    expect(byPlan.ok).toBe(false);
    expect(!byPlan.ok && byPlan.error).toContain(
      `image localhost/x:1 on worker w1 has digest ${d1}, not ${d2}`,
    );
    expect(imageRunRef(`localhost/x@${d2}`, undefined, local, where).ok).toBe(false);
  });
});

describe('the worker containers.conf and the probe', () => {
  it('drops the default ulimits and names the runtime only when one was chosen', () => {
    expect(containersConf(null)).toContain('[containers]\ndefault_ulimits = []\n');
    expect(containersConf(null)).not.toContain('[engine]');
    expect(containersConf('/usr/sbin/runc')).toContain('[engine]\nruntime = "/usr/sbin/runc"\n');
  });

  it('parses --container-engine', () => {
    expect(parseContainerEngine('auto')).toBe('auto');
    expect(parseContainerEngine('none')).toBe('none');
    expect(() => parseContainerEngine('lxc')).toThrow(/expected auto, podman, docker or none/);
  });

  const confDir = mkdtempSync(join(tmpdir(), 'gpu-broker-probe-'));
  afterAll(() => rmSync(confDir, { recursive: true, force: true }));

  it('with none, has no engine and says container tasks wait', async () => {
    const probe = await probeContainerEngine({ engine: 'none', confDir });
    expect(probe.setup).toBeNull();
    expect(probe.detail).toMatch(/container tasks wait/);
  });

  it('finds this machine’s podman, able to start a container, with its own containers.conf', async () => {
    const probe = await probeContainerEngine({ engine: 'auto', confDir });
    expect(probe.setup?.engine).toBe('podman');
    expect(probe.setup?.env['CONTAINERS_CONF']).toBe(join(confDir, 'containers.conf'));
    expect(probe.detail).toMatch(/^container tasks: podman/);
  });

  it('without any engine on the path, says why and never throws', async () => {
    const probe = await probeContainerEngine({ engine: 'auto', confDir, path: join(confDir, 'empty-bin') });
    expect(probe.setup).toBeNull();
    expect(probe.detail).toMatch(/podman is not installed.*docker is not installed/);
  });
});

describe('the runtime fallback', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-runtime-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('falls back to runc when the first runtime cannot start a container, and writes it to containers.conf', async () => {
    const broken = join(dir, 'broken-runtime');
    writeFileSync(broken, '#!/bin/sh\necho "cgroups in hybrid mode not supported" >&2\nexit 1\n', {
      mode: 0o755,
    });
    const confDir = join(dir, 'conf');
    const probe = await probeContainerEngine({
      engine: 'podman',
      confDir,
      runtimes: [broken, '/usr/sbin/runc'],
    });
    expect(probe.setup?.engine).toBe('podman');
    expect(probe.detail).toContain('runtime /usr/sbin/runc');
    expect(readFileSync(join(confDir, 'containers.conf'), 'utf8')).toContain('runtime = "/usr/sbin/runc"');
  });

  it('says why when no runtime works', async () => {
    const broken = join(dir, 'broken-runtime');
    const probe = await probeContainerEngine({
      engine: 'podman',
      confDir: join(dir, 'conf2'),
      runtimes: [broken],
    });
    expect(probe.setup).toBeNull();
    expect(probe.detail).toMatch(/podman cannot start a container here/);
  });
});
