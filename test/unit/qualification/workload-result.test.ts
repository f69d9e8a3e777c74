import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { WorkloadResult } from '../../../qualification/verify/schema.js';
import {
  checkWorkloadResult,
  MAX_GEMM_TOLERANCE,
  WORKLOAD_CHECK_NAMES,
  type WorkloadExpectation,
} from '../../../qualification/verify/workload-checks.js';
import {
  WORKLOAD_RELATIVE_PATH,
  workloadPath,
  workloadSha256,
} from '../../../qualification/workload/location.js';

const BYTES = 4 * 1024 * 1024;

/** A document as the workload writes it for `n` simulated cards, every number consistent. */
function validDoc(n: number): WorkloadResult {
  const ids = Array.from({ length: n }, (_, i) => i);
  return {
    schema_version: 1,
    task_id: 'task-1',
    execution_id: 'exec-1',
    assignment_id: 'asg-1',
    lease_epoch: 7,
    gpu_ids: ids,
    gpu_uuids: ids.map((i) => `SIM-${i}`),
    worker_id: 'worker-1',
    hostname: 'gpu-host-1',
    backend: 'gloo',
    simulated: true,
    world_size: n,
    versions: { python: '3.11.2', torch: '1.13.0', cuda: null, hip: null, nccl: null },
    visible_devices: { CUDA_VISIBLE_DEVICES: ids.join(','), HIP_VISIBLE_DEVICES: null },
    parameters: { gemm_n: 256, allreduce_bytes: BYTES, warmup: 1, iters: 5, tolerance: 1e-4 },
    started_at: '2026-01-01T00:00:00+00:00',
    finished_at: '2026-01-01T00:00:02+00:00',
    device_names: ids.map(() => 'cpu (x86_64), simulated card'),
    ranks: ids.map((rank) => {
      const algbw = BYTES / 0.004 / 1e9;
      return {
        rank,
        device: 'cpu',
        device_name: 'cpu (x86_64), simulated card',
        allreduce_sum: { value: (n * (n + 1)) / 2, expected: (n * (n + 1)) / 2, ok: true },
        gemm: {
          n: 256,
          max_abs_err: 4.6e-5,
          max_rel_err: 7e-7,
          tolerance: 1e-4,
          ok: true,
          median_s: 0.006,
          tflops: 0.0056,
        },
        bandwidth: {
          bytes: BYTES,
          median_s: 0.004,
          algbw_gbps: algbw,
          busbw_gbps: n === 1 ? null : (algbw * 2 * (n - 1)) / n,
        },
      };
    }),
    ok: true,
    error: null,
  };
}

function expected(n: number, overrides: Partial<WorkloadExpectation> = {}): WorkloadExpectation {
  const ids = Array.from({ length: n }, (_, i) => i);
  return {
    task_id: 'task-1',
    execution_id: 'exec-1',
    assignment_id: 'asg-1',
    lease_epoch: 7,
    gpu_ids: ids,
    worker_id: 'worker-1',
    simulated: true,
    ...overrides,
  };
}

function failed(doc: unknown, exp: WorkloadExpectation): string[] {
  return checkWorkloadResult(doc, exp)
    .filter((c) => !c.ok)
    .map((c) => c.name);
}

/** A deep copy to tamper with; the valid fixture stays intact. */
function tamper(n: number, edit: (doc: WorkloadResult) => void): WorkloadResult {
  const doc = structuredClone(validDoc(n));
  edit(doc);
  return doc;
}

function rank(doc: WorkloadResult, i: number): WorkloadResult['ranks'][number] {
  const r = doc.ranks[i];
  if (!r) throw new Error(`fixture has no rank ${i}`);
  return r;
}

describe('checkWorkloadResult', () => {
  it.each([1, 2, 4, 8])('passes a consistent document for %i card(s)', (n) => {
    const checks = checkWorkloadResult(validDoc(n), expected(n));
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    expect(checks.map((c) => c.name)).toEqual(WORKLOAD_CHECK_NAMES.filter((c) => c !== 'binding.gpu_uuids'));
  });

  it('checks the uuids only when the master supplies them', () => {
    const exp = expected(2, { gpu_uuids: ['SIM-0', 'SIM-1'] });
    expect(failed(validDoc(2), exp)).toEqual([]);
    expect(failed(validDoc(2), { ...exp, gpu_uuids: ['SIM-1', 'SIM-0'] })).toEqual(['binding.gpu_uuids']);
  });

  it('fails allreduce.sum on a wrong sum, even when the document agrees with itself', () => {
    const doc = tamper(4, (d) => {
      rank(d, 2).allreduce_sum = { value: 9, expected: 9, ok: true };
    });
    expect(failed(doc, expected(4))).toEqual(['allreduce.sum']);
  });

  it('fails allreduce.sum when the document recomputes expected for another N', () => {
    // Four ranks summing 1..4 = 10 would be "ok" against a self-reported N of 4, but 2 cards were leased.
    const doc = tamper(4, () => {});
    expect(failed(doc, expected(2))).toContain('allreduce.sum');
  });

  it('fails ranks.complete on a missing rank', () => {
    const doc = tamper(4, (d) => {
      d.ranks.splice(3, 1);
    });
    expect(failed(doc, expected(4))).toEqual(['ranks.complete']);
  });

  it('fails ranks.complete on a duplicated rank', () => {
    const doc = tamper(2, (d) => {
      d.ranks[1] = structuredClone(rank(d, 0));
    });
    const checks = checkWorkloadResult(doc, expected(2));
    expect(checks.filter((c) => !c.ok).map((c) => c.name)).toEqual(['ranks.complete']);
    expect(checks.find((c) => c.name === 'ranks.complete')?.detail).toMatch(
      /missing ranks 1; duplicated ranks 0/,
    );
  });

  it('fails ranks.complete when world_size differs from the lease', () => {
    expect(failed(validDoc(2), expected(2, { gpu_ids: [0, 1, 2] }))).toContain('ranks.complete');
  });

  it.each([
    ['binding.task_id', { task_id: 'task-other' }],
    ['binding.execution_id', { execution_id: 'exec-other' }],
    ['binding.assignment_id', { assignment_id: 'asg-other' }],
    ['binding.lease_epoch', { lease_epoch: 8 }],
    ['binding.worker_id', { worker_id: 'worker-other' }],
  ] as const)('fails %s when bound to another run', (name, overrides) => {
    expect(failed(validDoc(2), expected(2, overrides))).toEqual([name]);
  });

  it('fails binding.gpu_ids for other cards, or the same cards in another order', () => {
    expect(failed(validDoc(2), expected(2, { gpu_ids: [2, 3] }))).toEqual(['binding.gpu_ids']);
    expect(failed(validDoc(2), expected(2, { gpu_ids: [1, 0] }))).toEqual(['binding.gpu_ids']);
  });

  it('fails busbw.consistent when busbw does not follow from algbw', () => {
    const doc = tamper(8, (d) => {
      const b = rank(d, 5).bandwidth!;
      b.busbw_gbps = (b.busbw_gbps ?? 0) * 1.05;
    });
    expect(failed(doc, expected(8))).toEqual(['busbw.consistent']);
  });

  it('accepts busbw within 1 % and requires null at n=1 and a number above it', () => {
    const close = tamper(2, (d) => {
      const b = rank(d, 0).bandwidth!;
      b.busbw_gbps = (b.busbw_gbps ?? 0) * 1.005;
    });
    expect(failed(close, expected(2))).toEqual([]);
    const atOne = tamper(1, (d) => {
      rank(d, 0).bandwidth!.busbw_gbps = rank(d, 0).bandwidth!.algbw_gbps;
    });
    expect(failed(atOne, expected(1))).toEqual(['busbw.consistent']);
    const missing = tamper(2, (d) => {
      rank(d, 1).bandwidth!.busbw_gbps = null;
    });
    expect(failed(missing, expected(2))).toEqual(['busbw.consistent']);
  });

  it('fails algbw.consistent when algbw does not follow from bytes and time', () => {
    const doc = tamper(2, (d) => {
      rank(d, 0).bandwidth!.algbw_gbps *= 2;
    });
    // busbw was computed from the old algbw, so it no longer follows either.
    expect(failed(doc, expected(2))).toEqual(['algbw.consistent', 'busbw.consistent']);
  });

  it('fails gemm.ok when the error is over the tolerance, whatever the ok flag says', () => {
    const doc = tamper(2, (d) => {
      rank(d, 1).gemm.max_rel_err = 2e-4;
    });
    expect(failed(doc, expected(2))).toEqual(['gemm.ok']);
  });

  it('fails gemm.ok on a non-finite error, a flagged failure, or a tolerance above the cap', () => {
    const nonFinite = tamper(1, (d) => {
      rank(d, 0).gemm.max_abs_err = null;
    });
    expect(failed(nonFinite, expected(1))).toEqual(['gemm.ok']);
    const flagged = tamper(1, (d) => {
      rank(d, 0).gemm.ok = false;
    });
    expect(failed(flagged, expected(1))).toEqual(['gemm.ok']);
    const loose = tamper(1, (d) => {
      d.parameters.tolerance = MAX_GEMM_TOLERANCE * 10;
      rank(d, 0).gemm.tolerance = MAX_GEMM_TOLERANCE * 10;
      rank(d, 0).gemm.max_rel_err = MAX_GEMM_TOLERANCE * 5;
    });
    expect(failed(loose, expected(1))).toEqual(['gemm.ok']);
  });

  it('fails backend.matches on gloo for real cards, nccl for simulated ones, or a simulated mismatch', () => {
    expect(failed(validDoc(2), expected(2, { simulated: false }))).toEqual(['backend.matches']);
    const nccl = tamper(2, (d) => {
      d.backend = 'nccl';
    });
    expect(failed(nccl, expected(2))).toEqual(['backend.matches']);
    // Claims real cards with nccl, but the ranks ran on the CPU.
    const cpuAsGpu = tamper(2, (d) => {
      d.backend = 'nccl';
      d.simulated = false;
    });
    const checks = checkWorkloadResult(cpuAsGpu, expected(2, { simulated: false }));
    expect(checks.filter((c) => !c.ok).map((c) => c.name)).toEqual(['backend.matches']);
    expect(checks.find((c) => c.name === 'backend.matches')?.detail).toMatch(/rank 0 on cpu/);
  });

  it('passes a real-card document with nccl on cuda:rank', () => {
    const doc = tamper(2, (d) => {
      d.backend = 'nccl';
      d.simulated = false;
      for (const r of d.ranks) r.device = `cuda:${r.rank}`;
    });
    expect(failed(doc, expected(2, { simulated: false }))).toEqual([]);
  });

  it('fails run.error and every rank check on a crash report with no ranks', () => {
    const doc = tamper(2, (d) => {
      d.ranks = [];
      d.device_names = [];
      d.ok = false;
      d.error = 'Process 1 terminated with the following error: RuntimeError';
    });
    expect(failed(doc, expected(2))).toEqual([
      'run.error',
      'ranks.complete',
      'allreduce.sum',
      'gemm.ok',
      'algbw.consistent',
      'busbw.consistent',
    ]);
  });

  it.each([
    ['task_id', (d: Record<string, unknown>) => delete d['task_id']],
    ['lease_epoch as a string', (d: Record<string, unknown>) => (d['lease_epoch'] = '7')],
    ['ranks', (d: Record<string, unknown>) => delete d['ranks']],
    [
      'a rank gemm',
      (d: Record<string, unknown>) => delete (d['ranks'] as Record<string, unknown>[])[0]?.['gemm'],
    ],
    ['schema_version', (d: Record<string, unknown>) => (d['schema_version'] = 2)],
  ])('fails closed when %s is missing or malformed: every check fails', (_what, edit) => {
    const doc = structuredClone(validDoc(2)) as unknown as Record<string, unknown>;
    edit(doc);
    const checks = checkWorkloadResult(doc, expected(2));
    expect(checks.every((c) => !c.ok)).toBe(true);
    expect(checks[0]?.name).toBe('result.schema');
    expect(checks.map((c) => c.name)).toEqual(WORKLOAD_CHECK_NAMES.filter((c) => c !== 'binding.gpu_uuids'));
  });

  it.each([undefined, null, 'not json', 42, []])('fails closed on %j', (value) => {
    expect(checkWorkloadResult(value, expected(1)).every((c) => !c.ok)).toBe(true);
  });
});

describe('workload script pinning', () => {
  it('locates the script under the package root', () => {
    expect(workloadPath().endsWith(WORKLOAD_RELATIVE_PATH)).toBe(true);
    expect(workloadSha256()).toMatch(/^[0-9a-f]{64}$/);
  });

  it('hashes the script bytes under a given root', () => {
    const root = mkdtempSync(join(tmpdir(), 'gpu-broker-pin-'));
    try {
      mkdirSync(join(root, 'qualification', 'workload'), { recursive: true });
      writeFileSync(join(root, WORKLOAD_RELATIVE_PATH), 'abc');
      // sha256("abc"), the FIPS 180-2 test vector.
      expect(workloadSha256(root)).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
