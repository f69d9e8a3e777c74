import { describe, expect, it } from 'vitest';
import { evidenceRung, summaryRows } from '../../../qualification/verify/evidence.js';
import type { WorkloadResult } from '../../../qualification/verify/schema.js';
import { type RunFacts, type RungRecords, verifyRung } from '../../../qualification/verify/verifier.js';
import { SLURM_CHECK_NAMES } from '../../../qualification/verify/workload-checks.js';
import { qualificationSpec } from '../../../qualification/workload/spec.js';
import { digestOf, sha256Hex } from '../../../src/platform/digest.js';

/**
 * The verifier on Slurm rungs (ADR 0017), from hand-built master records: a consistent two-node rung
 * passes; a forged or mismatched binding — in the document or in what the worker reported — fails
 * closed, by name.
 */

const BYTES = 4 * 1024 * 1024;
const PIN = { interpreter: '/usr/bin/python3', script: '/opt/gb/qualify.py', sha256: 'a'.repeat(64) };
const JOB = '4242';
const NODES = [
  { node: 'n1', gpus: [0, 1, 2, 3] },
  { node: 'n2', gpus: [0, 1, 2, 3] },
];

function facts(over: Partial<RunFacts> = {}): RunFacts {
  return {
    run_id: 'qrun_1',
    worker_id: 'slurm-pool',
    submitter_id: 'prin_sub',
    reviewer_id: 'prin_rev',
    reserved_cards: [0, 1, 2, 3, 4, 5, 6, 7],
    simulated: true,
    backend: 'slurm',
    isolation: { mode: 'none', container_engine: null },
    pin: PIN,
    ...over,
  };
}

/** The workload's document for `cards` ranks as `perNode` per node over NODES (node-major). */
function doc(cards: number, perNode: number, simulated = true): WorkloadResult {
  const nodes = NODES.slice(0, cards / perNode).map((n) => ({
    node: n.node,
    gpus: n.gpus.slice(0, perNode),
    cuda_visible_devices: n.gpus.slice(0, perNode).join(','),
  }));
  const sum = (cards * (cards + 1)) / 2;
  const algbw = BYTES / 0.004 / 1e9;
  return {
    schema_version: 1,
    task_id: 'task_1',
    execution_id: 'exec_1',
    assignment_id: 'asg_1',
    lease_epoch: 3,
    gpu_ids: [],
    gpu_uuids: [],
    worker_id: 'slurm-pool',
    hostname: 'n1',
    backend: simulated ? 'gloo' : 'nccl',
    simulated,
    world_size: cards,
    versions: { python: '3.11.2', torch: '1.13.0', cuda: null, hip: null, nccl: null },
    visible_devices: { CUDA_VISIBLE_DEVICES: '0,1,2,3' },
    parameters: { gemm_n: 256, allreduce_bytes: BYTES, warmup: 1, iters: 5, tolerance: 1e-4 },
    started_at: '2026-01-01T00:00:00+00:00',
    finished_at: '2026-01-01T00:00:02+00:00',
    device_names: Array.from({ length: cards }, () => 'cpu'),
    ranks: Array.from({ length: cards }, (_, rank) => ({
      rank,
      device: simulated ? 'cpu' : `cuda:${rank % perNode}`,
      device_name: 'cpu',
      allreduce_sum: { value: sum, expected: sum, ok: true },
      gemm: {
        n: 256,
        max_abs_err: 1e-5,
        max_rel_err: 7e-7,
        tolerance: 1e-4,
        ok: true,
        median_s: 0.006,
        tflops: 0.005,
      },
      bandwidth: {
        bytes: BYTES,
        median_s: 0.004,
        algbw_gbps: algbw,
        busbw_gbps: (algbw * 2 * (cards - 1)) / cards,
      },
      node: nodes[Math.floor(rank / perNode)]!.node,
      local_rank: rank % perNode,
    })),
    ok: true,
    error: null,
    slurm: { job_id: JOB, nodes },
  };
}

/** A consistent chain for one Slurm rung: proposal → approved revision → task → lease → execution. */
function records(
  cards: number,
  perNode: number | null,
  document: unknown = doc(cards, perNode ?? cards),
): RungRecords {
  const spec = qualificationSpec('qrun_1', 'slurm-pool', cards, PIN, perNode);
  const digest = digestOf(spec);
  const bytes = Buffer.from(JSON.stringify(document));
  const sha = sha256Hex(bytes);
  const per = perNode ?? cards;
  return {
    cards,
    per_node: perNode,
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
      worker_id: 'slurm-pool',
      lease_epoch: 3,
      state: 'RELEASED',
      cards: Array.from({ length: cards }, (_, i) => ({ index: i, uuid: `slurm:pool:gpu${i}` })),
      released_by: 'lease.cleaned',
    },
    execution: {
      id: 'exec_1',
      task_id: 'task_1',
      lease_id: 'lease_1',
      assignment_id: 'asg_1',
      worker_id: 'slurm-pool',
      lease_epoch: 3,
      phase: 'cleaned',
      outputs: [{ path: 'qualification.json', sha256: sha, size: bytes.length }],
      slurm: {
        job_id: JOB,
        binding: {
          nodes: NODES.slice(0, cards / per).map((n) => ({ node: n.node, gpus: n.gpus.slice(0, per) })),
        },
      },
    },
    output: {
      path: 'qualification.json',
      sha256: sha,
      size: bytes.length,
      content_base64: bytes.toString('base64'),
    },
  };
}

const failed = (run: RunFacts, r: RungRecords) =>
  verifyRung(run, r)
    .filter((c) => !c.ok)
    .map((c) => c.name);

describe('verifyRung on a Slurm worker', () => {
  it('passes a consistent two-node rung and a one-node rung, with the slurm checks in place of gpu ids', () => {
    const checks = verifyRung(facts(), records(8, 4));
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    const names = checks.map((c) => c.name);
    expect(names).toContain('slurm.binding');
    for (const n of SLURM_CHECK_NAMES) expect(names).toContain(n);
    expect(names).not.toContain('binding.gpu_ids');
    expect(checks.find((c) => c.name === 'slurm.nodes')?.detail).toBe('n1:[0,1,2,3] n2:[0,1,2,3]');
    expect(failed(facts(), records(2, null))).toEqual([]);
  });

  it('real cards: each rank on cuda:<local rank> of its node, nccl', () => {
    const run = facts({ simulated: false });
    expect(failed(run, records(8, 4, doc(8, 4, false)))).toEqual([]);
    const d = doc(8, 4, false);
    d.ranks[5]!.device = 'cuda:5'; // a global index: not a device of n2
    expect(failed(run, records(8, 4, d))).toEqual(['backend.matches']);
  });

  it('a document with another job id fails slurm.job_id', () => {
    const d = doc(8, 4);
    d.slurm!.job_id = '4241';
    expect(failed(facts(), records(8, 4, d))).toEqual(['slurm.job_id']);
  });

  it('a document whose nodes or GPU indices differ from the recorded binding fails slurm.nodes', () => {
    const swapped = doc(8, 4);
    swapped.slurm!.nodes.reverse();
    expect(failed(facts(), records(8, 4, swapped))).toContain('slurm.nodes');
    const other = doc(8, 4);
    other.slurm!.nodes[1]!.gpus = [4, 5, 6, 7];
    expect(failed(facts(), records(8, 4, other))).toEqual(['slurm.nodes']);
  });

  it('a rank that ran on the wrong node, or with the wrong local rank, fails slurm.ranks', () => {
    const d = doc(8, 4);
    d.ranks[6]!.node = 'n1';
    expect(failed(facts(), records(8, 4, d))).toEqual(['slurm.ranks']);
    const e = doc(8, 4);
    e.ranks[2]!.local_rank = 0;
    expect(failed(facts(), records(8, 4, e))).toEqual(['slurm.ranks']);
    const f = doc(8, 4);
    delete f.ranks[0]!.node;
    expect(failed(facts(), records(8, 4, f))).toEqual(['slurm.ranks']);
  });

  it('a document without a slurm section (a local run copied in) fails every slurm check', () => {
    const d = doc(8, 4) as Partial<WorkloadResult>;
    delete d.slurm;
    expect(failed(facts(), records(8, 4, d))).toEqual([...SLURM_CHECK_NAMES]);
  });

  it('a binding the worker reported that does not add up to the rung fails slurm.binding', () => {
    const r = records(8, 4);
    r.execution!.slurm!.binding!.nodes[1]!.gpus = [0, 1, 2];
    expect(failed(facts(), r)).toEqual(['slurm.binding', 'slurm.nodes']);
    const twice = records(8, 4);
    twice.execution!.slurm!.binding!.nodes[1]!.node = 'n1';
    expect(failed(facts(), twice)).toContain('slurm.binding');
    const one = records(8, 4);
    one.execution!.slurm!.binding!.nodes.pop();
    expect(failed(facts(), one)).toContain('slurm.binding');
  });

  it('no Slurm job recorded for the execution fails closed', () => {
    const r = records(8, 4);
    r.execution!.slurm = null;
    expect(failed(facts(), r)).toEqual(['slurm.binding', ...SLURM_CHECK_NAMES]);
    const pending = records(8, 4);
    pending.execution!.slurm!.binding = null;
    expect(failed(facts(), pending)).toEqual(['slurm.binding', ...SLURM_CHECK_NAMES]);
  });

  it('the span rung must run the span spec: a plain 8-card spec fails spec.expected', () => {
    const plain = records(8, null, doc(8, 4));
    plain.per_node = 4; // the runner judged it as the span rung
    expect(failed(facts(), plain)).toContain('spec.expected');
  });

  it('missing records fail the slurm checks too, not only the local ones', () => {
    const r = records(8, 4);
    r.execution = null;
    const names = failed(facts(), r);
    for (const n of ['slurm.binding', ...SLURM_CHECK_NAMES]) expect(names).toContain(n);
  });

  it('the evidence rung carries per_node and where Slurm ran it; the table shows nodes, not slots', () => {
    const r = records(8, 4);
    const rung = evidenceRung(r, verifyRung(facts(), r));
    expect(rung).toMatchObject({ cards: 8, per_node: 4, slurm: { job_id: JOB, nodes: NODES }, ok: true });
    const rows = summaryRows({
      ladder: { requested: [1], run: [], span: { cards: 8, per_node: 4 }, skipped: [], not_run: [] },
      rungs: [rung],
    } as never);
    expect(rows[0]?.slice(0, 2)).toEqual(['8 (2x4)', 'n1:0,1,2,3 n2:0,1,2,3']);
  });
});
