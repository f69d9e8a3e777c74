import type { WorkloadCheck, WorkloadResult } from './schema.js';

/**
 * The checks of a rung run on a Slurm pool worker (docs/decisions/0017-slurm-qualification.md). Pure,
 * fail-closed. The lease's card indexes are pool slots the job never sees, so the Slurm job takes their
 * place: the job the master recorded must have the rung's shape (`slurm.binding`), and the job the
 * ranks saw must be that job, on those nodes and GPUs, rank by rank (`slurm.job_id`, `slurm.nodes`,
 * `slurm.ranks`, which stand in for `binding.gpu_ids` and `binding.gpu_uuids`).
 */

/** The Slurm job behind an execution as the master recorded it (the worker's report). */
export interface RecordedSlurmJob {
  job_id: string;
  binding: { nodes: ReadonlyArray<{ node: string; gpus: readonly number[] }> } | null;
}

/** What the master recorded of a Slurm rung's job. */
export interface SlurmExpectation {
  job_id: string;
  nodes: ReadonlyArray<{ node: string; gpus: readonly number[] }>;
  per_node: number;
}

/** The checks of a Slurm rung that take the place of `binding.gpu_ids` and `binding.gpu_uuids`. */
export const SLURM_CHECK_NAMES = ['slurm.job_id', 'slurm.nodes', 'slurm.ranks'] as const;

/**
 * A Slurm rung's job as the ranks saw it against the master's record of it (ADR 0017): the same job
 * id; the same nodes in the same order, each with the same GPU indices; rank r on node r / per_node as
 * local rank r mod per_node. A document without `slurm`, or no record on the master, fails all three.
 */
export function checkSlurmJob(doc: WorkloadResult, want: SlurmExpectation | null): WorkloadCheck[] {
  const seen = doc.slurm;
  if (want === null || seen === undefined) {
    const why =
      want === null
        ? 'the master recorded no Slurm binding for the execution'
        : 'the result has no slurm section (not run as a Slurm job)';
    return SLURM_CHECK_NAMES.map((name) => ({ name, ok: false, detail: why }));
  }
  const jobId: WorkloadCheck =
    seen.job_id === want.job_id
      ? { name: 'slurm.job_id', ok: true, detail: `job ${seen.job_id}` }
      : { name: 'slurm.job_id', ok: false, detail: `expected job ${want.job_id}, found ${seen.job_id}` };
  const show = (nodes: ReadonlyArray<{ node: string; gpus: readonly number[] }>) =>
    nodes.map((n) => `${n.node}:[${sorted(n.gpus).join(',')}]`).join(' ');
  const sameNodes =
    seen.nodes.length === want.nodes.length &&
    seen.nodes.every((n, i) => {
      const w = want.nodes[i];
      return w !== undefined && n.node === w.node && sorted(n.gpus).join() === sorted(w.gpus).join();
    });
  const nodes: WorkloadCheck = sameNodes
    ? { name: 'slurm.nodes', ok: true, detail: show(seen.nodes) }
    : { name: 'slurm.nodes', ok: false, detail: `expected ${show(want.nodes)}, found ${show(seen.nodes)}` };
  const misplaced = doc.ranks.flatMap((r) => {
    const node = want.nodes[Math.floor(r.rank / want.per_node)]?.node;
    const local = r.rank % want.per_node;
    if (r.node === undefined || r.local_rank === undefined)
      return [`rank ${r.rank}: no node or local_rank recorded`];
    if (r.node !== node)
      return [`rank ${r.rank}: ran on ${r.node}, expected ${node ?? 'no node (rank beyond the job)'}`];
    if (r.local_rank !== local) return [`rank ${r.rank}: local_rank ${r.local_rank}, expected ${local}`];
    return [];
  });
  // No rank records is a failure: a check with nothing to look at must not pass.
  const ranks: WorkloadCheck =
    doc.ranks.length === 0
      ? { name: 'slurm.ranks', ok: false, detail: 'no rank records' }
      : misplaced.length === 0
        ? { name: 'slurm.ranks', ok: true, detail: `${doc.ranks.length} rank(s) ok` }
        : { name: 'slurm.ranks', ok: false, detail: misplaced.join('; ') };
  return [jobId, nodes, ranks];
}

function sorted(xs: readonly number[]): number[] {
  return [...xs].sort((a, b) => a - b);
}

/**
 * A Slurm rung's job as the master recorded it has the rung's shape: a job id, `cards / per_node`
 * distinct nodes, each with `per_node` distinct GPU indices. Catches a worker reporting a binding that
 * does not add up to the lease (fewer GPUs, one node twice) before the workload's own view is compared.
 */
export function checkSlurmBinding(
  job: RecordedSlurmJob | null | undefined,
  cards: number,
  perNodeOrNull: number | null,
): WorkloadCheck {
  const name = 'slurm.binding';
  const bad = (detail: string): WorkloadCheck => ({ name, ok: false, detail });
  if (!job) return bad('no Slurm job was recorded for the execution');
  if (job.binding === null) return bad(`job ${job.job_id} has no recorded binding (it never started)`);
  const perNode = perNodeOrNull ?? cards;
  const wantNodes = cards / perNode;
  const nodes = job.binding.nodes;
  const problems: string[] = [];
  if (nodes.length !== wantNodes) problems.push(`${nodes.length} node(s), expected ${wantNodes}`);
  if (new Set(nodes.map((n) => n.node)).size !== nodes.length) problems.push('a node is listed twice');
  for (const n of nodes) {
    if (n.gpus.length !== perNode || new Set(n.gpus).size !== n.gpus.length)
      problems.push(`${n.node} has GPUs [${n.gpus.join(',')}], expected ${perNode} distinct`);
  }
  const shown = nodes.map((n) => `${n.node}:[${n.gpus.join(',')}]`).join(' ');
  return problems.length === 0
    ? { name, ok: true, detail: `job ${job.job_id} on ${shown}` }
    : bad(`job ${job.job_id}: ${problems.join('; ')}`);
}
