import { type TaskSpec, TaskSpecSchema } from '../../src/contracts/task-spec.js';
import { digestOf } from '../../src/platform/digest.js';
import { WORKLOAD_RESULT_FILE } from './location.js';

/**
 * The exact task spec a qualification rung proposes. It is a pure function of the run id, the worker,
 * the card count and the pinned workload, so the runner's reviewer and the verifier can both recompute
 * its digest and refuse anything else an agent might have proposed instead.
 */

/** How the master's policy allows the bundled workload: interpreter + script, pinned by sha256. */
export interface WorkloadPin {
  interpreter: string;
  script: string;
  sha256: string;
}

/**
 * Time limit of one rung's task. 8 GPU ranks spawn in well under a minute and the GPU-sized workload
 * runs in seconds; the margin covers a slow first CUDA/NCCL initialisation on a cold host.
 */
export const RUNG_TIME_LIMIT_SECONDS = 900;

/**
 * The spec of one rung (already in its parsed form: what the master stores and digests). `migProfile`: a
 * single-card rung on a MIG slice of that profile (docs/decisions/0046-mig-slices-as-cards.md).
 */
export function qualificationSpec(
  runId: string,
  workerId: string,
  cards: number,
  pin: WorkloadPin,
  perNode: number | null = null,
  migProfile: string | null = null,
): TaskSpec {
  if (migProfile !== null) return sliceSpec(runId, workerId, pin, migProfile);
  // A span rung (Slurm, two nodes) names its shape; a one-host rung's spec is unchanged, digest included.
  const across = perNode === null ? '' : ` across ${cards / perNode} nodes (${perNode} per node)`;
  return TaskSpecSchema.parse({
    title: `qualification ${runId}: ${cards} card${cards === 1 ? '' : 's'}${across} on ${workerId}`,
    objective:
      `Qualify ${cards} card(s) of worker ${workerId}: all_reduce SUM of rank+1 over every rank, a GEMM ` +
      'checked against a float64 reference, and a timed large all_reduce (algbw, busbw).',
    success_criteria:
      `${WORKLOAD_RESULT_FILE} holds one record per rank 0..${cards - 1}; every sum equals ` +
      `${(cards * (cards + 1)) / 2}; every GEMM is within tolerance; busbw = algbw × 2(n−1)/n; every id ` +
      'matches the lease.',
    cards: perNode === null ? { count: cards } : { count: cards, per_node: perNode },
    // The ranks of a span rung meet at MASTER_ADDR:MASTER_PORT across nodes: each rank's sandbox needs
    // the host's network for that (a one-host rung keeps loopback only).
    ...(perNode === null ? {} : { network: 'host' }),
    worker: workerId,
    runtime: { kind: 'process', argv: [pin.interpreter, pin.script] },
    outputs: [{ path: WORKLOAD_RESULT_FILE, required: true }],
    time_limit_seconds: RUNG_TIME_LIMIT_SECONDS,
    notes:
      `Qualification run ${runId}. Runs only the bundled workload, pinned by sha256 ${pin.sha256} in the ` +
      'master policy; it reads the ids the worker binds into its environment and writes one JSON file.',
  });
}

/**
 * A slice rung's spec: one slice of the profile, and GEMM only. The workload sees a MIG slice in its
 * binding and runs no collective (all_reduce is not offered across MIG instances, and one MIG device per
 * process leaves nothing to reduce across); the verifier fails a slice rung whose result claims one.
 */
function sliceSpec(runId: string, workerId: string, pin: WorkloadPin, profile: string): TaskSpec {
  return TaskSpecSchema.parse({
    title: `qualification ${runId}: 1 MIG slice ${profile} on ${workerId}`,
    objective:
      `Qualify one MIG slice of profile ${profile} on worker ${workerId}: a GEMM checked against a float64 ` +
      'reference, GEMM only (all_reduce is not offered across MIG instances).',
    success_criteria:
      `${WORKLOAD_RESULT_FILE} holds one record for rank 0 in mode gemm_only, with no all_reduce and no ` +
      'bandwidth; the GEMM is within tolerance; every id matches the lease, whose slice has this profile.',
    cards: { count: 1, mig_profile: profile },
    worker: workerId,
    runtime: { kind: 'process', argv: [pin.interpreter, pin.script] },
    outputs: [{ path: WORKLOAD_RESULT_FILE, required: true }],
    time_limit_seconds: RUNG_TIME_LIMIT_SECONDS,
    notes:
      `Qualification run ${runId}. Runs only the bundled workload, pinned by sha256 ${pin.sha256} in the ` +
      'master policy; it reads the ids the worker binds into its environment and writes one JSON file.',
  });
}

/** The digest the rung's revision must have (sha256 of the spec's canonical JSON). */
export function qualificationSpecDigest(
  runId: string,
  workerId: string,
  cards: number,
  pin: WorkloadPin,
  perNode: number | null = null,
  migProfile: string | null = null,
): string {
  return digestOf(qualificationSpec(runId, workerId, cards, pin, perNode, migProfile));
}
