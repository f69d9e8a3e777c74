import { statfsSync } from 'node:fs';
import { availableParallelism, tmpdir, totalmem } from 'node:os';
import { describe, expect, it } from 'vitest';
import { HelloSchema, PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import { buildHello, type HelloFacts, hostResources } from '../../../../worker/daemon/hello.js';
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
    expect(host!.memory_mib).toBe(Math.floor(totalmem() / 1024 / 1024));
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
