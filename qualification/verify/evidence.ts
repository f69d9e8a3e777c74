import { canonicalJson } from '../../src/contracts/canonical-json.js';
import { cardLabel } from '../../src/contracts/sample.js';
import { sha256Hex } from '../../src/platform/digest.js';
import type { WorkloadPin } from '../workload/spec.js';
import { WorkloadResultSchema } from './schema.js';
import type { Check, RungRecords } from './verifier.js';

/**
 * The evidence document of a qualification run (docs/qualification.md "Reading the
 * evidence"). It is canonical JSON: `digest` is the sha256 of the canonical JSON of the document
 * without its `digest` member, so anyone holding the document can recompute it. Each rung carries the
 * ids of the whole chain, the uploaded result document itself and every check with its detail, so the
 * workload checks can be re-run from the document alone.
 */

/** Identifies the document's format. */
export const EVIDENCE_SCHEMA = 'gpu-broker.qualification-evidence/2';

/** The verdicts. */
export type Verdict = 'PASSED' | 'FAILED' | 'INCONCLUSIVE';

/** The headline numbers of one rung, read from its result document (null when it did not parse). */
export interface RungSummary {
  backend: string;
  simulated: boolean;
  device_names: string[];
  /** Rank 0's all_reduce SUM, and N(N+1)/2 recomputed from the lease; null on a GEMM-only slice rung. */
  allreduce: { value: number | null; expected: number } | null;
  /** Whether every rank's GEMM was within tolerance, and the worst relative error. */
  gemm: { ok: boolean; max_rel_err: number | null; n: number };
  /** The slowest rank's numbers (GB/s); busbw is null at one card, both on a GEMM-only slice rung. */
  algbw_gbps: number | null;
  busbw_gbps: number | null;
}

/** One rung of the ladder as recorded and checked. */
export interface EvidenceRung {
  cards: number;
  /** Slurm span rungs only: GPUs per node (the rung ran on cards / per_node nodes). */
  per_node?: number;
  /**
   * MIG slice rungs only (ADR 0046): the profile the rung asked for (`mig.slice` checks that the leased
   * slice has it), and the leased slice's label and `MIG-` uuid (null when nothing was leased).
   */
  mig?: { profile: string; card: string | null; uuid: string | null };
  /** Slurm workers only: the job and where Slurm placed it, as the master recorded it (ADR 0017). */
  slurm?: { job_id: string; nodes: Array<{ node: string; gpus: number[] }> | null };
  ok: boolean;
  proposal_id: string | null;
  revision_id: string | null;
  revision_digest: string | null;
  review_id: string | null;
  reviewer_id: string | null;
  task_id: string | null;
  task_state: string | null;
  execution_id: string | null;
  assignment_id: string | null;
  lease_id: string | null;
  lease_epoch: number | null;
  gpu_ids: number[];
  gpu_uuids: string[];
  output: { path: string; sha256: string; size: number } | null;
  /** The uploaded qualification.json, parsed (null when absent or not JSON). */
  result: unknown;
  summary: RungSummary | null;
  checks: Check[];
}

/** The whole document, before it is sealed with its digest. */
export interface EvidenceBody {
  schema: typeof EVIDENCE_SCHEMA;
  run_id: string;
  verdict: Verdict;
  /**
   * The worker, as the master's row said when the run started. `isolation`: `bwrap` (each task
   * sandboxed), `none` (UNISOLATED) or null (no row); `container_engine` when it has one. Added in /2.
   */
  worker: {
    worker_id: string;
    hostname: string | null;
    provider: string | null;
    simulated: boolean;
    isolation: 'bwrap' | 'none' | null;
    container_engine: string | null;
    /** `slurm` for a Slurm pool worker (each rung a Slurm job; see `rungs[].slurm`); absent for a host. */
    backend?: 'slurm';
  };
  submitter: { kind: string; principal: string; principal_id: string };
  reviewer: { principal: string; principal_id: string };
  workload: WorkloadPin;
  ladder: {
    requested: number[];
    run: number[];
    /** The single-card GEMM rungs on MIG slices, run first (absent when there were none). */
    slices?: Array<{ card: string; profile: string | null }>;
    /** A Slurm pool's two-node rung, run after `run` (absent when there was none). */
    span?: { cards: number; per_node: number };
    skipped: Array<{ cards: number; reason: string }>;
    not_run: Array<{ cards: number; reason: string }>;
  };
  reserved_cards: number[];
  started_at: string;
  finished_at: string;
  rungs: EvidenceRung[];
  postconditions: Check[];
  /** Every failed check as `<cards> card(s): <name>: <detail>` (post-conditions as `post: …`). */
  failed_checks: string[];
}

/** The sealed document. */
export type EvidenceDocument = EvidenceBody & { digest: string };

/** The sha256 of the canonical JSON of the document without `digest`. */
export function evidenceDigest(doc: EvidenceBody | EvidenceDocument): string {
  const { digest: _digest, ...body } = doc as EvidenceDocument;
  return sha256Hex(canonicalJson(body));
}

/** Adds the digest. */
export function sealEvidence(body: EvidenceBody): EvidenceDocument {
  // Canonicalising drops undefined members and rejects non-finite numbers, so what is stored is
  // exactly what was hashed.
  const canonical = JSON.parse(canonicalJson(body)) as EvidenceBody;
  return { ...canonical, digest: evidenceDigest(canonical) };
}

/** Builds one rung's entry from its records and checks. */
export function evidenceRung(r: RungRecords, checks: Check[]): EvidenceRung {
  const approval =
    r.reviews.find((v) => v.decision === 'APPROVE' && v.revision_id === r.task?.revision_id) ??
    r.reviews.find((v) => v.decision === 'APPROVE') ??
    null;
  let result: unknown = null;
  if (r.output !== null) {
    try {
      result = JSON.parse(Buffer.from(r.output.content_base64, 'base64').toString('utf8'));
    } catch {
      result = null;
    }
  }
  const job = r.execution?.slurm ?? null;
  const profile = r.mig_profile ?? null;
  const slice = r.lease?.cards[0];
  return {
    cards: r.cards,
    ...(r.per_node === null ? {} : { per_node: r.per_node }),
    ...(profile === null
      ? {}
      : {
          mig: {
            profile,
            card: slice === undefined ? null : cardLabel(slice.index),
            uuid: slice?.uuid ?? null,
          },
        }),
    ...(job === null ? {} : { slurm: { job_id: job.job_id, nodes: job.binding?.nodes ?? null } }),
    ok: checks.every((c) => c.ok),
    proposal_id: r.proposal?.id ?? null,
    revision_id: r.task?.revision_id ?? r.revision?.id ?? null,
    revision_digest: r.task?.spec_digest ?? r.revision?.digest ?? null,
    review_id: approval?.id ?? null,
    reviewer_id: approval?.reviewer_id ?? null,
    task_id: r.task?.id ?? null,
    task_state: r.task?.state ?? null,
    execution_id: r.execution?.id ?? null,
    assignment_id: r.execution?.assignment_id ?? null,
    lease_id: r.lease?.id ?? null,
    lease_epoch: r.lease?.lease_epoch ?? null,
    gpu_ids: r.lease?.cards.map((c) => c.index) ?? [],
    gpu_uuids: r.lease?.cards.map((c) => c.uuid) ?? [],
    output: r.output ? { path: r.output.path, sha256: r.output.sha256, size: r.output.size } : null,
    result,
    summary: summarize(result, r.cards, profile !== null),
    checks,
  };
}

/**
 * The headline numbers. A GEMM-only slice rung has no all_reduce or bandwidth to show (whatever its
 * document claims: `mig.gemm_only` fails such a claim); any other rung shows null where a rank has none.
 */
function summarize(result: unknown, n: number, gemmOnly: boolean): RungSummary | null {
  const parsed = WorkloadResultSchema.safeParse(result);
  if (!parsed.success || parsed.data.ranks.length === 0) return null;
  const doc = parsed.data;
  const rank0 = doc.ranks.find((r) => r.rank === 0) ?? doc.ranks[0]!;
  const relErrs = doc.ranks.map((r) => r.gemm.max_rel_err);
  const bandwidths = doc.ranks.map((r) => r.bandwidth);
  const measured = !gemmOnly && bandwidths.every((b) => b !== null);
  const busbws = measured ? bandwidths.map((b) => b?.busbw_gbps ?? null) : [null];
  return {
    backend: doc.backend,
    simulated: doc.simulated,
    device_names: doc.device_names,
    allreduce: gemmOnly ? null : { value: rank0.allreduce_sum?.value ?? null, expected: (n * (n + 1)) / 2 },
    gemm: {
      ok: doc.ranks.every((r) => r.gemm.ok),
      max_rel_err: relErrs.includes(null) ? null : Math.max(...(relErrs as number[])),
      n: doc.parameters.gemm_n,
    },
    algbw_gbps: measured ? Math.min(...bandwidths.map((b) => b?.algbw_gbps ?? 0)) : null,
    busbw_gbps: busbws.includes(null) ? null : Math.min(...(busbws as number[])),
  };
}

/** How a rung is named in failed checks and tables: `2 cards`, `1 card (MIG 1g.10gb)`. */
export function rungName(r: Pick<EvidenceRung, 'cards' | 'mig'>): string {
  return `${r.cards} card${r.cards === 1 ? '' : 's'}${r.mig ? ` (MIG ${r.mig.profile})` : ''}`;
}

/** Every failed check, one line each. */
export function failedChecks(rungs: readonly EvidenceRung[], post: readonly Check[]): string[] {
  return [
    ...rungs.flatMap((r) =>
      r.checks.filter((c) => !c.ok).map((c) => `${rungName(r)}: ${c.name}: ${c.detail}`),
    ),
    ...post.filter((c) => !c.ok).map((c) => `post: ${c.name}: ${c.detail}`),
  ];
}

/** One line for people: how the worker isolated the run's tasks (documents before /2 did not record it). */
export function isolationLine(worker: Partial<EvidenceBody['worker']>): string {
  if (worker.isolation === undefined) return 'isolation: not recorded (evidence older than schema /2)';
  if (worker.isolation === null) return 'isolation: unknown (the master had no row for the worker)';
  const engine = worker.container_engine ? `; container engine ${worker.container_engine}` : '';
  return worker.isolation === 'none'
    ? `isolation: none — UNISOLATED worker: tasks ran as plain processes on the host${engine}`
    : `isolation: ${worker.isolation} (each task sandboxed)${engine}`;
}

/** The human summary table's rows: cards, gpu ids, all_reduce value/expected, GEMM, busbw, verdict. */
export function summaryRows(doc: EvidenceBody): Array<Array<string | number>> {
  const rows: Array<Array<string | number>> = doc.rungs.map((r) => {
    const s = r.summary;
    // A Slurm rung's pool slots say nothing about devices: show where Slurm ran it instead.
    const where = r.slurm
      ? (r.slurm.nodes ?? []).map((n) => `${n.node}:${n.gpus.join(',')}`).join(' ') || `job ${r.slurm.job_id}`
      : r.gpu_ids.map(cardLabel).join(',');
    return [
      r.mig
        ? `1 (MIG ${r.mig.profile})`
        : r.per_node === undefined
          ? r.cards
          : `${r.cards} (${r.cards / r.per_node}x${r.per_node})`,
      where || '-',
      s
        ? s.allreduce === null
          ? 'n/a (GEMM only)'
          : `${s.allreduce.value ?? 'null'}/${s.allreduce.expected}`
        : '-',
      s
        ? `${s.gemm.ok ? 'ok' : 'FAILED'} (rel err ${s.gemm.max_rel_err === null ? 'n/a' : s.gemm.max_rel_err.toExponential(1)})`
        : '-',
      s
        ? s.busbw_gbps !== null
          ? s.busbw_gbps.toFixed(2)
          : s.algbw_gbps === null
            ? 'n/a'
            : `n/a (algbw ${s.algbw_gbps.toFixed(2)})`
        : '-',
      r.ok ? 'ok' : 'FAILED',
    ];
  });
  for (const s of [...doc.ladder.skipped, ...doc.ladder.not_run])
    rows.push([s.cards, '-', '-', '-', '-', `not run: ${s.reason}`]);
  return rows;
}
