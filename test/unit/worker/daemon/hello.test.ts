import { statfsSync } from 'node:fs';
import { availableParallelism, tmpdir, totalmem } from 'node:os';
import { describe, expect, it } from 'vitest';
import { HelloSchema, PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import {
  buildHello,
  cgroupMemoryLimit,
  type HelloFacts,
  hostResources,
} from '../../../../worker/daemon/hello.js';
import type { ExecutionRecord } from '../../../../worker/store/local-store.js';
import { makePlan } from '../../../support/executor-plan.js';

/** The worker's hello (worker/daemon/hello.ts): built from what the worker knows, and valid on the wire. */

const plan = makePlan({
  argv: ['/bin/true'],
  executionId: 'e1',
  cards: [
    { index: 2, uuid: 'GPU-2' },
    { index: 0, uuid: 'GPU-0' },
  ],
});
const record: ExecutionRecord = {
  execution_id: 'e1',
  task_id: plan.task_id,
  lease_epoch: plan.lease_epoch,
  phase: 'started',
  plan,
  result: null,
  pgid: 42,
  pgid_identity: null,
  slurm: null,
  created_at: 1,
  updated_at: 2,
};
const facts: HelloFacts = {
  workerId: 'w1',
  bootId: 'b1',
  version: '1.2.3',
  hostname: `h${'x'.repeat(300)}`,
  provider: 'sim',
  cards: [],
  executions: [record],
  masterMarks: [],
  cardEpochs: [{ index: 2, epoch: 7 }],
  isolation: 'bwrap',
  containerEngine: null,
  mounts: [{ name: 'data', host_path: '/srv/secret/data', read_only: true }],
  backend: 'local',
  slurm: null,
  seccomp: { version: 'v1-0123456789ab', allowed: ['io_uring'] },
  host: { memory_mib: 24576, cpus: 8, disk_mib: 512000 },
};

describe('buildHello', () => {
  it('says who the worker is and what it knows, and passes the wire schema', () => {
    const hello = buildHello(facts);
    expect(hello).toMatchObject({
      type: 'hello',
      protocol_version: PROTOCOL_VERSION,
      worker_id: 'w1',
      boot_id: 'b1',
      executions: [
        {
          execution_id: 'e1',
          task_id: plan.task_id,
          lease_epoch: plan.lease_epoch,
          phase: 'started',
          cards: [2, 0],
        },
      ],
      card_epochs: [{ index: 2, epoch: 7 }],
      isolation: 'bwrap',
      backend: 'local',
      slurm: null,
      seccomp: { version: 'v1-0123456789ab', allowed: ['io_uring'] },
      host: { memory_mib: 24576, cpus: 8, disk_mib: 512000 },
    });
    expect(hello.hostname).toHaveLength(255);
    expect(HelloSchema.safeParse(hello).success).toBe(true);
  });

  it('names the mounts it offers, never their host paths', () => {
    expect(buildHello(facts).mounts).toEqual([{ name: 'data', read_only: true }]);
    expect(JSON.stringify(buildHello(facts))).not.toContain('/srv/secret');
  });
});

describe('hostResources', () => {
  it("reports this host's RAM, CPUs and the data dir's file system size, within the contract", () => {
    const host = hostResources(tmpdir());
    expect(host).not.toBeNull();
    expect(host!.cpus).toBe(availableParallelism());
    expect(host!.disk_mib).toBeGreaterThan(0);
    expect(host!.disk_mib).toBeLessThanOrEqual(
      Math.floor((statfsSync(tmpdir()).bavail * statfsSync(tmpdir()).bsize) / 1024 / 1024) + 64,
    );
    expect(HelloSchema.shape.host.safeParse(host).success).toBe(true);
  });
  it('is null when the data dir cannot be read', () => {
    expect(hostResources('/nonexistent/gpu-broker-data')).toBeNull();
  });
});

describe("the worker's own cgroup bounds its host's memory", () => {
  const MI_V1 =
    '30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:1 - cgroup cgroup rw,memory\n' +
    '31 25 0:27 / /sys/fs/cgroup/pids rw,nosuid shared:2 - cgroup cgroup rw,pids\n';
  const MI_V2 = '30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:1 - cgroup2 cgroup2 rw\n';
  const files = (map: Record<string, string>) => (path: string) => map[path] ?? null;

  it('takes the smallest limit from its cgroup up to the root (v1: a parent limited, itself not)', () => {
    const limit = cgroupMemoryLimit(
      MI_V1,
      '4:memory:/svc/worker\n8:pids:/\n',
      files({
        '/sys/fs/cgroup/memory/svc/worker/memory.limit_in_bytes': '9223372036854771712',
        '/sys/fs/cgroup/memory/svc/memory.limit_in_bytes': String(8 * 1024 ** 3),
        '/sys/fs/cgroup/memory/memory.limit_in_bytes': '9223372036854771712',
      }),
    );
    expect(limit).toBe(8 * 1024 ** 3);
  });

  it("v2's memory.max; 'max' everywhere is no limit", () => {
    expect(
      cgroupMemoryLimit(
        MI_V2,
        '0::/system.slice/gpu-broker-worker.service\n',
        files({
          '/sys/fs/cgroup/system.slice/gpu-broker-worker.service/memory.max': String(16 * 1024 ** 3),
          '/sys/fs/cgroup/system.slice/memory.max': 'max',
        }),
      ),
    ).toBe(16 * 1024 ** 3);
    expect(cgroupMemoryLimit(MI_V2, '0::/a\n', files({ '/sys/fs/cgroup/a/memory.max': 'max' }))).toBeNull();
    expect(cgroupMemoryLimit('', '', files({}))).toBeNull();
  });

  it("hostResources' memory is at most the machine's and its cgroup's", () => {
    const host = hostResources(tmpdir());
    const limit = cgroupMemoryLimit();
    expect(host!.memory_mib).toBeLessThanOrEqual(Math.floor(totalmem() / 1024 / 1024));
    if (limit !== null) expect(host!.memory_mib).toBeLessThanOrEqual(Math.floor(limit / 1024 / 1024));
  });
});
