import { describe, expect, it } from 'vitest';
import { evidenceRung, failedChecks, summaryRows } from '../../../qualification/verify/evidence.js';
import type { WorkloadResult } from '../../../qualification/verify/schema.js';
import { type RunFacts, type RungRecords, verifyRung } from '../../../qualification/verify/verifier.js';
import { workloadCheckNames } from '../../../qualification/verify/workload-checks.js';
import { qualificationSpec } from '../../../qualification/workload/spec.js';
import { migCardIndex } from '../../../src/contracts/sample.js';
import { digestOf, sha256Hex } from '../../../src/platform/digest.js';

/**
 * The verifier on a single-card rung on a MIG slice (ADR 0046), from hand-built master records: a
 * consistent GEMM-only rung passes and its evidence records the profile, the slice label and its MIG-
 * uuid; a slice the master has no profile for, another profile, a result that claims an all_reduce, a
 * whole-card rung that landed on a slice, or a slice rung on a whole card all fail, by name.
 */

const PIN = { interpreter: '/usr/bin/python3', script: '/opt/gb/qualify.py', sha256: 'a'.repeat(64) };
const SLICE = migCardIndex(0, 2, 0);
const UUID = 'MIG-SIM-0-2-0';

const FACTS: RunFacts = {
  run_id: 'qrun_1',
  worker_id: 'mig-host',
  submitter_id: 'prin_sub',
  reviewer_id: 'prin_rev',
  reserved_cards: [1, SLICE],
  simulated: true,
  backend: 'local',
  isolation: { mode: 'bwrap', container_engine: null },
  pin: PIN,
};

/** The workload's GEMM-only document on the slice, as qualify.py writes it for a simulated slice. */
function gemmOnlyDoc(over: Partial<WorkloadResult> = {}): WorkloadResult {
  return {
    schema_version: 1,
    task_id: 'task_1',
    execution_id: 'exec_1',
    assignment_id: 'asg_1',
    lease_epoch: 3,
    gpu_ids: [SLICE],
    gpu_labels: ['0:mig:2/0'],
    gpu_uuids: [UUID],
    mode: 'gemm_only',
    worker_id: 'mig-host',
    hostname: 'h',
    backend: 'none',
    simulated: true,
    world_size: 1,
    versions: { python: '3.11.2', torch: '1.13.0', cuda: null, hip: null, nccl: null },
    visible_devices: { CUDA_VISIBLE_DEVICES: UUID },
    parameters: { gemm_n: 256, allreduce_bytes: 4194304, warmup: 1, iters: 5, tolerance: 1e-4 },
    started_at: '2026-01-01T00:00:00+00:00',
    finished_at: '2026-01-01T00:00:01+00:00',
    device_names: ['cpu, simulated MIG slice'],
    ranks: [
      {
        rank: 0,
        device: 'cpu',
        device_name: 'cpu, simulated MIG slice',
        allreduce_sum: null,
        gemm: {
          n: 256,
          max_abs_err: 1e-5,
          max_rel_err: 7e-7,
          tolerance: 1e-4,
          ok: true,
          median_s: 0.006,
          tflops: 0.005,
        },
        bandwidth: null,
      },
    ],
    ok: true,
    error: null,
    ...over,
  };
}

/** A consistent chain for one rung: the spec of `profile` (null: a whole card), leased on `card`. */
function records(
  profile: string | null,
  card: { index: number; uuid: string; mig_profile?: string | null } = {
    index: SLICE,
    uuid: UUID,
    mig_profile: '2g.20gb',
  },
  document: unknown = gemmOnlyDoc(),
): RungRecords {
  const spec = qualificationSpec('qrun_1', 'mig-host', 1, PIN, null, profile);
  const digest = digestOf(spec);
  const bytes = Buffer.from(JSON.stringify(document));
  const sha = sha256Hex(bytes);
  return {
    cards: 1,
    per_node: null,
    mig_profile: profile,
    proposal: { id: 'prop_1', owner_id: 'prin_sub', state: 'APPROVED', task_id: 'task_1' },
    revision: { id: 'rev_1', digest, spec },
    reviews: [
      {
        id: 'rvw_1',
        revision_id: 'rev_1',
        revision_digest: digest,
        reviewer_id: 'prin_rev',
        decision: 'APPROVE',
      },
    ],
    task: {
      id: 'task_1',
      proposal_id: 'prop_1',
      revision_id: 'rev_1',
      owner_id: 'prin_sub',
      spec,
      spec_digest: digest,
      state: 'COMPLETED',
      failure_reason: null,
      exit_code: 0,
    },
    lease: {
      id: 'lease_1',
      task_id: 'task_1',
      worker_id: 'mig-host',
      lease_epoch: 3,
      state: 'RELEASED',
      cards: [card],
      released_by: 'lease.cleaned',
    },
    execution: {
      id: 'exec_1',
      task_id: 'task_1',
      lease_id: 'lease_1',
      assignment_id: 'asg_1',
      worker_id: 'mig-host',
      lease_epoch: 3,
      phase: 'cleaned',
      outputs: [{ path: 'qualification.json', sha256: sha, size: bytes.length }],
      slurm: null,
    },
    output: {
      path: 'qualification.json',
      sha256: sha,
      size: bytes.length,
      content_base64: bytes.toString('base64'),
    },
  };
}

const failed = (r: RungRecords) => verifyRung(FACTS, r).filter((c) => !c.ok);

describe('a MIG slice rung', () => {
  it('asks for the slice by profile in its spec, and GEMM only', () => {
    const spec = qualificationSpec('qrun_1', 'mig-host', 1, PIN, null, '2g.20gb');
    expect(spec.cards).toEqual({ count: 1, mig_profile: '2g.20gb' });
    expect(spec.objective).toContain('GEMM only (all_reduce is not offered across MIG instances)');
    // The whole-card spec is unchanged (its digest included).
    expect(digestOf(qualificationSpec('qrun_1', 'mig-host', 1, PIN, null, null))).toBe(
      digestOf(qualificationSpec('qrun_1', 'mig-host', 1, PIN)),
    );
  });

  it('passes with mig.gemm_only in place of the collective checks; the evidence records profile, slice and MIG uuid', () => {
    const r = records('2g.20gb');
    const checks = verifyRung(FACTS, r);
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    const names = checks.map((c) => c.name);
    expect(names).toContain('mig.slice');
    expect(names).toContain('mig.gemm_only');
    for (const gone of ['allreduce.sum', 'algbw.consistent', 'busbw.consistent'])
      expect(names).not.toContain(gone);
    const entry = evidenceRung(r, checks);
    expect(entry.mig).toEqual({ profile: '2g.20gb', card: '0:mig:2/0', uuid: UUID });
    expect(entry.gpu_ids).toEqual([SLICE]);
    expect(entry.summary).toMatchObject({
      backend: 'none',
      allreduce: null,
      algbw_gbps: null,
      busbw_gbps: null,
    });
    expect(checks.find((c) => c.name === 'mig.slice')?.detail).toBe(`0:mig:2/0 (2g.20gb) ${UUID}`);
  });

  it('shows in the table as a MIG rung on its slice label, GEMM only', () => {
    const r = records('2g.20gb');
    const entry = evidenceRung(r, verifyRung(FACTS, r));
    const rows = summaryRows({ rungs: [entry], ladder: { skipped: [], not_run: [] } } as never);
    expect(rows).toEqual([
      ['1 (MIG 2g.20gb)', '0:mig:2/0', 'n/a (GEMM only)', 'ok (rel err 7.0e-7)', 'n/a', 'ok'],
    ]);
  });

  it('fails closed when the master recorded no profile for the leased slice', () => {
    const r = records('2g.20gb', { index: SLICE, uuid: UUID, mig_profile: null });
    expect(failed(r).map((c) => c.name)).toEqual(['mig.slice']);
    expect(failed(r)[0]?.detail).toBe('the master has no profile recorded for slice 0:mig:2/0');
    const noField = records('2g.20gb', { index: SLICE, uuid: UUID });
    expect(failed(noField).map((c) => c.name)).toEqual(['mig.slice']);
  });

  it('fails when the leased slice has another profile than the rung asked for', () => {
    const r = records('2g.20gb', { index: SLICE, uuid: UUID, mig_profile: '1g.10gb' });
    expect(failed(r).map((c) => [c.name, c.detail])).toEqual([
      ['mig.slice', 'slice 0:mig:2/0 has profile 1g.10gb, the rung asked for 2g.20gb'],
    ]);
  });

  it('fails a result that claims an all_reduce (or a bandwidth) on a slice, or is not GEMM-only', () => {
    const claimed = gemmOnlyDoc();
    claimed.ranks[0]!.allreduce_sum = { value: 1, expected: 1, ok: true };
    expect(failed(records('2g.20gb', undefined, claimed)).map((c) => c.name)).toEqual(['mig.gemm_only']);
    const bandwidth = gemmOnlyDoc();
    bandwidth.ranks[0]!.bandwidth = {
      bytes: 4194304,
      median_s: 0.004,
      algbw_gbps: 1.048576,
      busbw_gbps: null,
    };
    expect(failed(records('2g.20gb', undefined, bandwidth)).map((c) => c.name)).toEqual(['mig.gemm_only']);
    const collective = gemmOnlyDoc({ mode: 'collective' });
    expect(failed(records('2g.20gb', undefined, collective)).map((c) => c.name)).toEqual(['mig.gemm_only']);
    // A backend other than none means a process group was started.
    expect(
      failed(records('2g.20gb', undefined, gemmOnlyDoc({ backend: 'gloo' }))).map((c) => c.name),
    ).toEqual(['backend.matches']);
  });

  it('a whole-card rung that ran on a slice fails, and its GEMM-only result fails the collective checks', () => {
    const r = records(null);
    const names = failed(r).map((c) => c.name);
    expect(names).toContain('mig.slice');
    expect(names).toContain('allreduce.sum');
    expect(failed(r).find((c) => c.name === 'mig.slice')?.detail).toMatch(
      /^a whole-card rung ran on MIG slice\(s\) 0:mig:2\/0: all_reduce is not offered across MIG instances$/,
    );
  });

  it('a slice rung on a whole card fails', () => {
    const whole = gemmOnlyDoc({ gpu_ids: [1], gpu_uuids: ['SIM-1'] });
    const r = records('2g.20gb', { index: 1, uuid: 'SIM-1' }, whole);
    expect(failed(r).map((c) => [c.name, c.detail])).toEqual([
      ['mig.slice', 'card 1 is a whole card, not a MIG slice'],
    ]);
  });

  it('without a lease every check that needs one fails, mig.slice included, and the failed lines name the profile', () => {
    const r = { ...records('2g.20gb'), lease: null, execution: null, output: null };
    const checks = verifyRung(FACTS, r);
    const names = checks.filter((c) => !c.ok).map((c) => c.name);
    expect(names).toContain('mig.slice');
    expect(names).toContain('mig.gemm_only');
    expect(names).toContain('gemm.ok');
    const entry = evidenceRung(r, checks);
    expect(entry.mig).toEqual({ profile: '2g.20gb', card: null, uuid: null });
    expect(failedChecks([entry], [])[0]).toMatch(/^1 card \(MIG 2g\.20gb\): /);
  });

  it('the check names of a slice rung leave out the collective', () => {
    expect(workloadCheckNames({ gpu_uuids: [], gemm_only: true })).toEqual([
      'result.schema',
      'binding.task_id',
      'binding.execution_id',
      'binding.assignment_id',
      'binding.lease_epoch',
      'binding.gpu_ids',
      'binding.worker_id',
      'binding.gpu_uuids',
      'run.error',
      'ranks.complete',
      'mig.gemm_only',
      'gemm.ok',
      'backend.matches',
    ]);
  });
});
