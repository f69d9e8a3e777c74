import { describe, expect, it } from 'vitest';
import { PolicySchema } from '../../../../src/contracts/policy.js';
import { DEFAULT_LIMITS_PER_CARD, HostResourcesSchema } from '../../../../src/contracts/task-limits.js';
import { TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import { evaluatePolicy } from '../../../../src/domain/policy/evaluate.js';
import {
  describeLimits,
  hostAllowance,
  hostShortfall,
  maxLimits,
  resolveLimits,
} from '../../../../src/domain/policy/task-limits.js';
import { validSpec } from '../../../support/spec.js';

// A task's limits from its spec and the policy (src/domain/policy/task-limits.ts), and the finding for an ask
// over the maximum.

const policy = PolicySchema.parse({
  executables: [{ path: '/bin/sh' }],
  task_limits: {
    per_card: { memory_mib: 1000, pids: 100, cpu_weight: 100, tmp_mib: 10, shm_mib: 20, disk_mib: 50 },
    max_per_card: { memory_mib: 4000, pids: 400, cpu_weight: 10000, tmp_mib: 40, shm_mib: 80, disk_mib: 200 },
  },
});
const spec = (over: object = {}) => TaskSpecSchema.parse(validSpec(over));

describe('resolveLimits', () => {
  it('gives the per-card defaults times the cards when the spec asks for nothing', () => {
    expect(resolveLimits(spec(), policy)).toEqual({
      memory_mib: 1000,
      pids: 100,
      cpu_weight: 100,
      tmp_mib: 10,
      shm_mib: 20,
      disk_mib: 50,
    });
    expect(resolveLimits(spec({ cards: { count: 8 } }), policy).memory_mib).toBe(8000);
    // cgroup's cpu.weight stops at 10000, whatever the card count.
    expect(
      resolveLimits(spec({ cards: { count: 64 } }), {
        ...policy,
        task_limits: {
          ...policy.task_limits,
          per_card: { ...policy.task_limits.per_card, cpu_weight: 1000 },
        },
      }).cpu_weight,
    ).toBe(10000);
  });

  it('takes the spec’s asks, less or more than the default, and clamps to the maximum', () => {
    const r = resolveLimits(spec({ limits: { memory_mib: 3000, pids: 10 } }), policy);
    expect(r.memory_mib).toBe(3000);
    expect(r.pids).toBe(10);
    expect(r.tmp_mib).toBe(10);
    expect(resolveLimits(spec({ limits: { memory_mib: 9999 } }), policy).memory_mib).toBe(4000);
  });

  it('has sound defaults in a policy that says nothing', () => {
    const bare = PolicySchema.parse({});
    expect(bare.task_limits.per_card).toEqual(DEFAULT_LIMITS_PER_CARD);
    expect(maxLimits(bare, 2).memory_mib).toBe(2 * bare.task_limits.max_per_card.memory_mib);
  });
});

describe('limits in the policy check', () => {
  it('is an error finding (LIMIT_OVER_POLICY) per limit over the maximum, none within it', () => {
    const findings = evaluatePolicy(spec({ limits: { memory_mib: 4001, shm_mib: 81, pids: 400 } }), policy, {
      fileDigests: {},
    }).filter((f) => f.code === 'LIMIT_OVER_POLICY');
    expect(findings.map((f) => [f.severity, f.path])).toEqual([
      ['error', 'limits.memory_mib'],
      ['error', 'limits.shm_mib'],
    ]);
    expect(findings[0]?.message).toContain('at most 4000');
    // Two cards may ask for twice as much.
    expect(
      evaluatePolicy(spec({ cards: { count: 2 }, limits: { memory_mib: 8000 } }), policy, {
        fileDigests: {},
      }).some((f) => f.code === 'LIMIT_OVER_POLICY'),
    ).toBe(false);
  });

  it('refuses nonsense asks at parse time, and a policy whose default exceeds its maximum', () => {
    for (const limits of [
      { memory_mib: 0 },
      { pids: -1 },
      { cpu_weight: 10001 },
      { tmp_mib: 1.5 },
      { swap: 1 },
    ])
      expect(TaskSpecSchema.safeParse(validSpec({ limits })).success).toBe(false);
    expect(
      PolicySchema.safeParse({ task_limits: { per_card: { ...DEFAULT_LIMITS_PER_CARD, pids: 10 ** 6 } } })
        .success,
    ).toBe(false);
  });

  it('reads as one line', () => {
    expect(describeLimits(resolveLimits(spec(), policy))).toBe(
      'memory 1000 MiB, pids 100, cpu weight 100, /tmp 10 MiB, /dev/shm 20 MiB, task dir 50 MiB',
    );
  });
});

describe('limits follow the machine (docs/security.md "The task sandbox")', () => {
  const bare = PolicySchema.parse({});
  // A 24 GiB, 4-card host with 500 GiB of disk, the default reserve (4 GiB RAM, 10 GiB disk).
  const small = hostAllowance(
    { memory_mib: 24576, cpus: 8, disk_mib: 512000 },
    4,
    bare.task_limits.host_reserve,
  );

  it('shares the host less the reserve: whole for one task, evenly per card for the defaults', () => {
    // CPUs: 8 less the 1 kept for the worker; only a task asking for limits.cpus takes any.
    expect(small.total).toEqual({
      memory_mib: 20480,
      tmp_mib: 20480,
      shm_mib: 20480,
      disk_mib: 501760,
      cpus: 7,
    });
    expect(small.per_card).toEqual({ memory_mib: 5120, tmp_mib: 5120, shm_mib: 5120, disk_mib: 125440 });
    expect(small.basis).toContain('24576 MiB RAM');
  });

  it("attack: the default memory is never above the host's share, nor eight tasks' defaults above its RAM", () => {
    // The policy's default is 32 GiB per card: on this host that alone is above its RAM.
    expect(bare.task_limits.per_card.memory_mib).toBeGreaterThan(24576);
    const one = resolveLimits(spec(), bare, small);
    expect(one.memory_mib).toBe(5120);
    expect(one.tmp_mib).toBe(5120);
    expect(one.shm_mib).toBe(5120);
    expect(resolveLimits(spec({ cards: { count: 4 } }), bare, small).memory_mib).toBe(20480);
    // An 8-card, 256 GiB host: eight 1-card tasks' defaults fit in its RAM less the reserve.
    const big = hostAllowance(
      { memory_mib: 262144, cpus: 64, disk_mib: 4_000_000 },
      8,
      bare.task_limits.host_reserve,
    );
    expect(8 * resolveLimits(spec(), bare, big).memory_mib).toBeLessThanOrEqual(262144 - 4096);
    // Unknown host: the policy's defaults as before.
    expect(resolveLimits(spec(), bare).memory_mib).toBe(bare.task_limits.per_card.memory_mib);
    // Limits the host does not bound are the policy's.
    expect(resolveLimits(spec(), bare, small).pids).toBe(bare.task_limits.per_card.pids);
  });

  it('gives an ask above the share but within the host; names the first ask above the host', () => {
    expect(resolveLimits(spec({ limits: { memory_mib: 16384 } }), bare, small).memory_mib).toBe(16384);
    expect(hostShortfall({ memory_mib: 16384 }, small)).toBeNull();
    expect(hostShortfall({ memory_mib: 65536, disk_mib: 1 }, small)).toEqual({
      name: 'memory_mib',
      ask: 65536,
      most: 20480,
    });
    expect(hostShortfall({ disk_mib: 600000 }, small)).toMatchObject({ name: 'disk_mib', most: 501760 });
  });

  it('a host smaller than its reserve gives the least there is, never zero or less', () => {
    const tiny = hostAllowance({ memory_mib: 2048, cpus: 1, disk_mib: 0 }, 2, bare.task_limits.host_reserve);
    expect(tiny.total.memory_mib).toBe(1);
    // A one-CPU host less its one reserved CPU still offers one.
    expect(tiny.total.cpus).toBe(1);
    expect(tiny.per_card.disk_mib).toBe(1);
    expect(
      PolicySchema.parse({ task_limits: { host_reserve: { memory_mib: 0 } } }).task_limits.host_reserve,
    ).toEqual({
      memory_mib: 0,
      disk_mib: 10240,
      cpus: 1,
    });
  });
});

describe('an ask within the policy that no enrolled host can give', () => {
  const largestHost = { memory_mib: 20480, tmp_mib: 20480, shm_mib: 20480, disk_mib: 6144, cpus: 15 };
  const findings = (limits: object, facts: object = { largestHost }) =>
    evaluatePolicy(spec({ limits }), policy, { fileDigests: {}, ...facts }).filter((f) =>
      f.code.startsWith('LIMIT_'),
    );

  it('is a warning naming the most the largest host can give; within it, or with no host known, none', () => {
    const big = PolicySchema.parse({ executables: [{ path: '/bin/sh' }] });
    const over = evaluatePolicy(spec({ limits: { memory_mib: 65536 } }), big, {
      fileDigests: {},
      largestHost,
    }).filter((f) => f.code.startsWith('LIMIT_'));
    expect(over.map((f) => [f.severity, f.code, f.path])).toEqual([
      ['warning', 'LIMIT_ABOVE_HOSTS', 'limits.memory_mib'],
    ]);
    expect(over[0]?.message).toContain('at most 20480');
    expect(over[0]?.hint).toContain('Ask for at most 20480');
    // pids and cpu_weight are not the host's to bound; an ask above the policy is the error, not this.
    expect(findings({ memory_mib: 3000, pids: 10 })).toEqual([]);
    expect(findings({ memory_mib: 9999 }).map((f) => f.code)).toEqual(['LIMIT_OVER_POLICY']);
    expect(
      evaluatePolicy(spec({ limits: { memory_mib: 65536 } }), big, { fileDigests: {} }).filter((f) =>
        f.code.startsWith('LIMIT_'),
      ),
    ).toEqual([]);
  });

  it('limits.cpus above the largest host’s CPUs is the same warning; within them, none (CPUs have no policy maximum)', () => {
    const big = PolicySchema.parse({ executables: [{ path: '/bin/sh' }] });
    const over = evaluatePolicy(spec({ limits: { cpus: 16 } }), big, { fileDigests: {}, largestHost });
    expect(over.filter((f) => f.code.startsWith('LIMIT_')).map((f) => [f.severity, f.code, f.path])).toEqual([
      ['warning', 'LIMIT_ABOVE_HOSTS', 'limits.cpus'],
    ]);
    expect(findings({ cpus: 15 })).toEqual([]);
    expect(findings({ cpus: 4096 }, {})).toEqual([]);
  });
});

describe('attack: limits.cpus out of range or of the wrong type is refused when the spec is read', () => {
  it('only whole CPUs from 1 to 65536; a host reporting none or too many is refused at its hello', () => {
    for (const cpus of [0, -1, 1.5, 65_537, Number.NaN, Number.POSITIVE_INFINITY, '4', null, 1e308])
      expect(TaskSpecSchema.safeParse(validSpec({ limits: { cpus } } as object)).success, String(cpus)).toBe(
        false,
      );
    expect(TaskSpecSchema.safeParse(validSpec({ limits: { cpus: 65_536 } } as object)).success).toBe(true);
    for (const cpus of [0, -4, 2.5, 65_537])
      expect(
        HostResourcesSchema.safeParse({ memory_mib: 1024, cpus, disk_mib: 0 }).success,
        String(cpus),
      ).toBe(false);
  });
});
