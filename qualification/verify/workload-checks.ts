import {
  WORKLOAD_SCHEMA_VERSION,
  type WorkloadCheck,
  type WorkloadRank,
  type WorkloadResult,
  WorkloadResultSchema,
} from './schema.js';
import { checkSlurmJob, SLURM_CHECK_NAMES, type SlurmExpectation } from './slurm-checks.js';

/**
 * The pure checks the verifier runs on the qualification workload's result document
 * (`qualification.json`, written by rank 0 of `qualification/workload/qualify.py`; its schema is
 * schema.ts) (docs/qualification.md).
 *
 * The document is evidence produced by code running on the worker, so nothing in it is taken on its
 * word: its `ok` flags and `expected` values are ignored; every verdict is recomputed from the measured
 * numbers and the ids the master bound the run to. Checks fail closed: a missing or unparsable part is a
 * failed check, never a skipped one.
 */

/**
 * Largest GEMM tolerance (on max|C − ref| / max|ref|) the checker accepts. The workload's default is
 * 1e-4 and correct fp32 hardware lands near 1e-6; the cap stops a run that was started with a huge
 * `--tolerance` from passing a wrong GEMM.
 */
export const MAX_GEMM_TOLERANCE = 1e-3;

/** Relative slack for the bandwidth arithmetic checks (1 %): the numbers are recomputed, not remeasured. */
export const BANDWIDTH_RELATIVE_SLACK = 0.01;

/** What the master bound the run to, from its own records (never from the document). */
export interface WorkloadExpectation {
  task_id: string;
  execution_id: string;
  assignment_id: string;
  lease_epoch: number;
  /** The leased card indexes, in lease order; N = their count. */
  gpu_ids: number[];
  worker_id: string;
  /** Whether the worker's cards are simulated (then, and only then, gloo on CPU is acceptable). */
  simulated: boolean;
  /** The leased cards' uuids as sampled; when given, `binding.gpu_uuids` is checked too. */
  gpu_uuids?: string[];
  /**
   * A Slurm rung: the job the master recorded for the execution (the worker's report, from Slurm's own
   * per-node GRES indices) and the rung's GPUs per node. Then the `slurm.*` checks replace
   * `binding.gpu_ids`/`binding.gpu_uuids` (the lease's indexes are pool slots a job never sees). Null:
   * a Slurm worker with no binding recorded, which fails those checks.
   */
  slurm?: SlurmExpectation | null;
  /**
   * A single-card rung on a MIG slice (the rung's shape, from the master's records): the document must
   * be in mode `gemm_only` and claim no all_reduce or bandwidth (`mig.gemm_only` replaces the collective
   * checks); all_reduce is not offered across MIG instances.
   */
  gemm_only?: boolean;
}

export { SLURM_CHECK_NAMES, type SlurmExpectation };

/** Every check name `checkWorkloadResult` can report, in report order. */
export const WORKLOAD_CHECK_NAMES = [
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
  'allreduce.sum',
  'gemm.ok',
  'algbw.consistent',
  'busbw.consistent',
  'backend.matches',
] as const;

/** The checks of the collective that a slice rung's `mig.gemm_only` stands in for. */
const COLLECTIVE_CHECKS: readonly string[] = ['allreduce.sum', 'algbw.consistent', 'busbw.consistent'];

/** The check names `checkWorkloadResult` reports for an expectation, in report order. */
export function workloadCheckNames(
  expected: Pick<WorkloadExpectation, 'gpu_uuids' | 'slurm' | 'gemm_only'>,
): string[] {
  if (expected.gemm_only === true)
    return workloadCheckNames({ ...expected, gemm_only: false }).flatMap((n) =>
      n === 'allreduce.sum' ? ['mig.gemm_only'] : COLLECTIVE_CHECKS.includes(n) ? [] : [n],
    );
  if (expected.slurm !== undefined)
    return WORKLOAD_CHECK_NAMES.flatMap((n) =>
      n === 'binding.gpu_ids' ? [...SLURM_CHECK_NAMES] : n === 'binding.gpu_uuids' ? [] : [n],
    );
  return WORKLOAD_CHECK_NAMES.filter((n) => n !== 'binding.gpu_uuids' || expected.gpu_uuids);
}

/**
 * Checks a parsed `qualification.json` against what the master bound the run to. Pure: no I/O, no
 * clock. Returns one entry per name of `workloadCheckNames(expected)`; the run qualifies only if every
 * entry is ok. A document that fails the schema fails every other check too, with a detail saying it
 * was not checkable.
 */
export function checkWorkloadResult(result: unknown, expected: WorkloadExpectation): WorkloadCheck[] {
  const names = workloadCheckNames(expected);
  const parsed = WorkloadResultSchema.safeParse(result);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 5)
      .map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`)
      .join('; ');
    return names.map((name) =>
      name === 'result.schema'
        ? { name, ok: false, detail: `does not match schema v${WORKLOAD_SCHEMA_VERSION}: ${issues}` }
        : { name, ok: false, detail: 'not checked: the document does not match the schema' },
    );
  }
  const doc = parsed.data;
  const checks: WorkloadCheck[] = [
    { name: 'result.schema', ok: true, detail: `schema v${WORKLOAD_SCHEMA_VERSION}` },
    same('binding.task_id', doc.task_id, expected.task_id),
    same('binding.execution_id', doc.execution_id, expected.execution_id),
    same('binding.assignment_id', doc.assignment_id, expected.assignment_id),
    same('binding.lease_epoch', doc.lease_epoch, expected.lease_epoch),
    ...(expected.slurm === undefined
      ? [sameList('binding.gpu_ids', doc.gpu_ids, expected.gpu_ids)]
      : checkSlurmJob(doc, expected.slurm)),
    same('binding.worker_id', doc.worker_id, expected.worker_id),
  ];
  if (expected.gpu_uuids && expected.slurm === undefined)
    checks.push(sameList('binding.gpu_uuids', doc.gpu_uuids, expected.gpu_uuids));
  checks.push(
    doc.error === null
      ? { name: 'run.error', ok: true, detail: 'no error reported' }
      : { name: 'run.error', ok: false, detail: `the workload reported: ${doc.error.slice(0, 500)}` },
  );
  const n = expected.gpu_ids.length;
  if (expected.gemm_only === true) {
    checks.push(
      checkRanksComplete(doc, n),
      checkGemmOnly(doc),
      perRank('gemm.ok', doc.ranks, (r) => checkGemm(r, doc.parameters)),
      checkBackend(doc, expected.simulated, false, true),
    );
    return checks;
  }
  checks.push(
    checkRanksComplete(doc, n),
    perRank('allreduce.sum', doc.ranks, (r) => checkSum(r, n)),
    perRank('gemm.ok', doc.ranks, (r) => checkGemm(r, doc.parameters)),
    perRank('algbw.consistent', doc.ranks, (r) => checkAlgbw(r, doc.parameters.allreduce_bytes)),
    perRank('busbw.consistent', doc.ranks, (r) => checkBusbw(r, n)),
    checkBackend(doc, expected.simulated, expected.slurm !== undefined),
  );
  return checks;
}

function same(name: string, found: string | number, want: string | number): WorkloadCheck {
  return found === want
    ? { name, ok: true, detail: `${JSON.stringify(found)}` }
    : { name, ok: false, detail: `expected ${JSON.stringify(want)}, found ${JSON.stringify(found)}` };
}

function sameList(name: string, found: readonly unknown[], want: readonly unknown[]): WorkloadCheck {
  // Order matters: rank i runs on the i-th leased card.
  const ok = found.length === want.length && found.every((v, i) => v === want[i]);
  return ok
    ? { name, ok, detail: JSON.stringify(found) }
    : { name, ok, detail: `expected ${JSON.stringify(want)}, found ${JSON.stringify(found)}` };
}

function checkRanksComplete(doc: WorkloadResult, n: number): WorkloadCheck {
  const name = 'ranks.complete';
  const problems: string[] = [];
  if (doc.world_size !== n) problems.push(`world_size is ${doc.world_size}, leased cards ${n}`);
  const seen = new Map<number, number>();
  for (const r of doc.ranks) seen.set(r.rank, (seen.get(r.rank) ?? 0) + 1);
  const missing = range(n).filter((i) => !seen.has(i));
  const duplicated = [...seen].filter(([, count]) => count > 1).map(([rank]) => rank);
  const extra = [...seen.keys()].filter((rank) => rank >= n);
  if (missing.length > 0) problems.push(`missing ranks ${missing.join(', ')}`);
  if (duplicated.length > 0) problems.push(`duplicated ranks ${duplicated.join(', ')}`);
  if (extra.length > 0) problems.push(`unexpected ranks ${extra.join(', ')}`);
  return problems.length === 0
    ? { name, ok: true, detail: `ranks 0..${n - 1}, once each` }
    : { name, ok: false, detail: problems.join('; ') };
}

/**
 * Runs `check` on every rank record and folds the results into one named check. No records is a
 * failure: a check with nothing to look at must not pass.
 */
function perRank(
  name: string,
  ranks: readonly WorkloadRank[],
  check: (r: WorkloadRank) => string | null,
): WorkloadCheck {
  if (ranks.length === 0) return { name, ok: false, detail: 'no rank records' };
  const problems = ranks.flatMap((r) => {
    const problem = check(r);
    return problem === null ? [] : [`rank ${r.rank}: ${problem}`];
  });
  return problems.length === 0
    ? { name, ok: true, detail: `${ranks.length} rank(s) ok` }
    : { name, ok: false, detail: problems.join('; ') };
}

/**
 * A slice rung ran the GEMM alone: the document says `gemm_only` and no rank claims an all_reduce or a
 * bandwidth. A claimed collective fails: all_reduce is not offered across MIG instances, so numbers for
 * one were not measured where the lease says.
 */
function checkGemmOnly(doc: WorkloadResult): WorkloadCheck {
  const name = 'mig.gemm_only';
  const problems: string[] = [];
  if (doc.mode !== 'gemm_only') problems.push(`mode is ${doc.mode ?? 'collective'}, expected gemm_only`);
  const claimed = doc.ranks
    .filter((r) => r.allreduce_sum !== null || r.bandwidth !== null)
    .map((r) => r.rank);
  if (claimed.length > 0)
    problems.push(
      `rank(s) ${claimed.join(', ')} claim an all_reduce or a bandwidth on a MIG slice, where all_reduce is not offered`,
    );
  return problems.length === 0
    ? { name, ok: true, detail: 'GEMM only (all_reduce is not offered across MIG instances)' }
    : { name, ok: false, detail: problems.join('; ') };
}

function checkSum(r: WorkloadRank, n: number): string | null {
  // Recomputed from the lease, never read from the document's `expected`.
  const want = (n * (n + 1)) / 2;
  if (r.allreduce_sum === null) return 'no all_reduce recorded';
  if (r.allreduce_sum.value !== want) return `value ${r.allreduce_sum.value}, expected ${want}`;
  if (!r.allreduce_sum.ok) return 'the workload flagged it as failed';
  return null;
}

function checkGemm(r: WorkloadRank, params: WorkloadResult['parameters']): string | null {
  const g = r.gemm;
  if (!g.ok) return 'the workload flagged it as failed';
  if (g.n !== params.gemm_n) return `n ${g.n} differs from parameters.gemm_n ${params.gemm_n}`;
  if (g.tolerance !== params.tolerance) return `tolerance ${g.tolerance} differs from parameters`;
  if (g.tolerance > MAX_GEMM_TOLERANCE) return `tolerance ${g.tolerance} above the cap ${MAX_GEMM_TOLERANCE}`;
  if (g.max_abs_err === null || g.max_rel_err === null) return 'error not finite';
  if (g.max_rel_err > g.tolerance) return `max_rel_err ${g.max_rel_err} > tolerance ${g.tolerance}`;
  return null;
}

function checkAlgbw(r: WorkloadRank, requestedBytes: number): string | null {
  const b = r.bandwidth;
  if (b === null) return 'no bandwidth recorded';
  // The workload reduces whole float32 elements, so it may round the request down by up to 3 bytes.
  if (b.bytes > requestedBytes || requestedBytes - b.bytes >= 4) {
    return `bytes ${b.bytes} differs from parameters.allreduce_bytes ${requestedBytes}`;
  }
  const want = b.bytes / b.median_s / 1e9;
  return near(b.algbw_gbps, want) ? null : `algbw ${b.algbw_gbps} GB/s, bytes/median_s gives ${want}`;
}

function checkBusbw(r: WorkloadRank, n: number): string | null {
  const b = r.bandwidth;
  if (b === null) return 'no bandwidth recorded';
  if (n === 1) return b.busbw_gbps === null ? null : `busbw ${b.busbw_gbps} reported at n=1, expected null`;
  const want = (b.algbw_gbps * 2 * (n - 1)) / n;
  if (b.busbw_gbps === null) return `busbw missing, expected ${want}`;
  return near(b.busbw_gbps, want) ? null : `busbw ${b.busbw_gbps} GB/s, algbw×2(n−1)/n gives ${want}`;
}

function checkBackend(
  doc: WorkloadResult,
  simulated: boolean,
  slurm: boolean,
  gemmOnly = false,
): WorkloadCheck {
  const name = 'backend.matches';
  // A GEMM-only rung starts no process group: its backend is `none`, on the one visible device.
  const wantBackend = gemmOnly ? 'none' : simulated ? 'gloo' : 'nccl';
  const problems: string[] = [];
  if (doc.simulated !== simulated)
    problems.push(`simulated is ${doc.simulated}, the worker's cards ${simulated}`);
  if (doc.backend !== wantBackend) problems.push(`backend ${doc.backend}, expected ${wantBackend}`);
  // A real-card run must have run every rank on its own accelerator, never on the CPU. On Slurm a rank
  // sees only its node's GPUs, so its device is numbered by its local rank.
  const badDevices = doc.ranks
    .filter((r) => r.device !== (simulated ? 'cpu' : `cuda:${slurm ? (r.local_rank ?? -1) : r.rank}`))
    .map((r) => `rank ${r.rank} on ${r.device}`);
  if (badDevices.length > 0) problems.push(badDevices.join(', '));
  return problems.length === 0
    ? { name, ok: true, detail: `${doc.backend}${simulated ? ' on CPU (simulated cards)' : ''}` }
    : { name, ok: false, detail: problems.join('; ') };
}

function near(found: number, want: number): boolean {
  return Math.abs(found - want) <= BANDWIDTH_RELATIVE_SLACK * Math.abs(want);
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}
