import { z } from 'zod';

/**
 * What a Slurm worker tells the master about its cluster (docs/decisions/0013-slurm-backend.md): its pool
 * at hello, and the job behind each execution. Part of the worker protocol;
 * src/contracts/worker-protocol.ts re-exports it, so consumers keep one import path.
 */

/** One Slurm node of a pool worker's partition, as its latest hello saw it. */
export const SlurmNodeSchema = z.object({
  name: z.string().min(1).max(255),
  gpus: z.number().int().min(0).max(64),
  state: z.string().max(64),
});

/**
 * What a Slurm worker says about its pool (docs/decisions/0013-slurm-backend.md): the partition and its
 * nodes. Its cards are the partition's GPUs numbered 0..N-1 over the nodes in name order; they are a
 * pool, so an index names a slot, not the device Slurm will give.
 */
export const SlurmPoolSchema = z.object({
  partition: z.string().min(1).max(255),
  nodes: z.array(SlurmNodeSchema).max(64),
});
/** What a Slurm worker says about its pool. */
export type SlurmPool = z.infer<typeof SlurmPoolSchema>;

/** Where Slurm ran a job: its nodes and, per node, the GPU indices the job's environment showed. */
export const SlurmBindingSchema = z.object({
  nodes: z
    .array(
      z.object({ node: z.string().min(1).max(255), gpus: z.array(z.number().int().min(0).max(255)).max(64) }),
    )
    .min(1)
    .max(64),
});
/** Where Slurm ran a job. */
export type SlurmBinding = z.infer<typeof SlurmBindingSchema>;

/**
 * What a Slurm worker knows about the job behind an execution: the job id (the fence on the cluster),
 * Slurm's state and, while the job pends, Slurm's own reason; the binding once the job has started.
 */
export const SlurmJobReportSchema = z.object({
  job_id: z
    .string()
    .regex(/^[0-9]+$/)
    .max(32),
  state: z.string().max(64),
  pending_reason: z.string().max(256).nullable(),
  binding: SlurmBindingSchema.nullable(),
});
/** What a Slurm worker knows about the job behind an execution. */
export type SlurmJobReport = z.infer<typeof SlurmJobReportSchema>;
