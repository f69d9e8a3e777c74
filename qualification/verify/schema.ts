import { z } from 'zod';

/**
 * The qualification workload's result document (`qualification.json`, written by rank 0 of
 * `qualification/workload/qualify.py`) as a schema, and the shape of one check's outcome. The checks
 * (workload-checks.ts, slurm-checks.ts) read both from here. Nothing in the document is taken on its
 * word: the checks recompute every verdict.
 */

/** Version of the result document this file understands; the workload writes the same number. */
export const WORKLOAD_SCHEMA_VERSION = 1;

const Id = z.string().min(1).max(128);
const Seconds = z.number().positive();

/** One rank's measurements. Non-finite measurements are written as null by the workload. */
export const WorkloadRankSchema = z.object({
  rank: z.number().int().min(0),
  device: z.string().min(1),
  device_name: z.string(),
  /** Null in mode `gemm_only` (a MIG slice rung runs no collective). */
  allreduce_sum: z.object({ value: z.number().nullable(), expected: z.number(), ok: z.boolean() }).nullable(),
  gemm: z.object({
    n: z.number().int().min(1),
    max_abs_err: z.number().min(0).nullable(),
    max_rel_err: z.number().min(0).nullable(),
    tolerance: z.number().positive(),
    ok: z.boolean(),
    median_s: Seconds,
    tflops: z.number().min(0).nullable(),
  }),
  bandwidth: z
    .object({
      bytes: z.number().int().min(1),
      median_s: Seconds,
      algbw_gbps: z.number().positive(),
      // Null at one rank, where nccl-tests' bus bandwidth has no meaning.
      busbw_gbps: z.number().min(0).nullable(),
    })
    .nullable(),
  /** Slurm rungs only: the node the rank ran on (SLURMD_NODENAME) and its rank on that node. */
  node: z.string().min(1).max(255).optional(),
  local_rank: z.number().int().min(0).optional(),
});
/** One rank's measurements. */
export type WorkloadRank = z.infer<typeof WorkloadRankSchema>;

/** The whole result document, as rank 0 writes it. Unknown keys are stripped, not refused. */
export const WorkloadResultSchema = z.object({
  schema_version: z.literal(WORKLOAD_SCHEMA_VERSION),
  task_id: Id,
  execution_id: Id,
  assignment_id: Id,
  lease_epoch: z.number().int().min(1),
  // Empty on a Slurm rung: a Slurm job sees devices, not the pool slots the lease names (`slurm` instead).
  gpu_ids: z.array(z.number().int().min(0)),
  gpu_uuids: z.array(z.string()),
  /**
   * `gemm_only` when the binding is a MIG slice (docs/decisions/0046-mig-slices-as-cards.md): no process
   * group, no all_reduce, no bandwidth, backend `none`. Absent: `collective` (every document before it).
   */
  mode: z.enum(['collective', 'gemm_only']).optional(),
  /** The binding's card labels as the worker gave them (`0:mig:2/0` for a slice); absent before slices. */
  gpu_labels: z.array(z.string().max(32)).optional(),
  worker_id: Id,
  hostname: z.string().min(1),
  backend: z.string().min(1),
  simulated: z.boolean(),
  world_size: z.number().int().min(1),
  versions: z.object({
    python: z.string(),
    torch: z.string(),
    cuda: z.string().nullable(),
    hip: z.string().nullable(),
    nccl: z.string().nullable(),
  }),
  visible_devices: z.record(z.string(), z.string().nullable()),
  parameters: z.object({
    gemm_n: z.number().int().min(1),
    allreduce_bytes: z.number().int().min(1),
    warmup: z.number().int().min(0),
    iters: z.number().int().min(1),
    tolerance: z.number().positive(),
  }),
  started_at: z.string(),
  finished_at: z.string(),
  device_names: z.array(z.string()),
  ranks: z.array(WorkloadRankSchema),
  ok: z.boolean(),
  error: z.string().nullable(),
  /** Slurm rungs only: the job as the ranks saw it, nodes in node-rank order (docs/slurm.md). */
  slurm: z
    .object({
      job_id: z.string().min(1).max(32),
      nodes: z
        .array(
          z.object({
            node: z.string().min(1).max(255),
            gpus: z.array(z.number().int().min(0)),
            cuda_visible_devices: z.string().nullable(),
          }),
        )
        .min(1)
        .max(64),
    })
    .optional(),
});
/** The whole result document. */
export type WorkloadResult = z.infer<typeof WorkloadResultSchema>;

/** The outcome of one named check. */
export interface WorkloadCheck {
  name: string;
  ok: boolean;
  detail: string;
}
