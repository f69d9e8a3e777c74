import { cardLabel } from '../../src/contracts/sample.js';
import { rungLabel } from '../../src/domain/qualification/ladder.js';
import {
  EVIDENCE_SCHEMA,
  type EvidenceDocument,
  type EvidenceRung,
  evidenceRung,
  failedChecks,
  sealEvidence,
} from '../verify/evidence.js';
import { type RunFacts, type RungRecords, verdictOf, verifyPost, verifyRung } from '../verify/verifier.js';
import { RUNG_TIME_LIMIT_SECONDS } from '../workload/spec.js';
import { type BrokerMcp, connectBrokerMcp } from './mcp-client.js';
import { RungDriver } from './rung-driver.js';
import type { RunnerHooks, RunnerOptions } from './runner-options.js';
import { postSettled, rungSettled, settle } from './runner-settle.js';

/**
 * The qualification runner (docs/qualification.md). It drives the whole path through MCP, as agents do, with
 * two principals created for the run: the submitter proposes and confirms the pinned workload for each card
 * count (itself, or by launching Claude Code / Codex with a prompt), the distinct reviewer reads the revision
 * and approves it only if it is exactly the workload spec, then the scheduler and the worker do the rest.
 * After each rung the verifier judges what the master recorded (gathered through `hooks`, which the broker
 * implements over its store); after the ladder it checks the post-conditions and seals the evidence document.
 * Storing it, and returning the cards on PASSED, is the broker's part.
 *
 * A failed rung stops the ladder (the rest are listed as not run): the verdict is FAILED either way,
 * and the next rung would only queue behind whatever the failure left behind.
 */

/** `GEMM on MIG slices 0:mig:1/0 (1g.10gb), 0:mig:2/0 (2g.20gb); ` or nothing. */
function sliceText(o: RunnerOptions): string {
  const slices = o.slices ?? [];
  if (slices.length === 0) return '';
  return `GEMM on MIG slice(s) ${slices.map((s) => `${s.card} (${s.profile ?? 'gone'})`).join(', ')}; `;
}

/** The run's first progress lines: what it will do, with what, and what it skipped. */
function announceRun(o: RunnerOptions, hooks: RunnerHooks): void {
  const { facts } = o;
  hooks.step(
    null,
    `qualifying ${facts.worker_id}: ${sliceText(o)}ladder ${o.ladder.join(',') || 'none'}${o.span ? ` then ${o.span.cards} cards across 2 nodes (${o.span.per_node} per node)` : ''}; cards ${facts.reserved_cards.map(cardLabel).join(',') || 'none'} cordoned for the run; submitter ${o.submitterKind} as ${o.submitter.name}, reviewer ${o.reviewer.name}`,
  );
  for (const s of o.skipped) hooks.step(s.cards, `skipped: ${s.reason}`);
}

/** What the ladder left: each rung's evidence, and the rungs not run after a failure. */
interface LadderOutcome {
  rungs: EvidenceRung[];
  notRun: Array<{ cards: number; reason: string }>;
}

/** Judges a settled rung's records, reports the result; returns the evidence and the failed checks' names. */
function judgeRung(
  facts: RunFacts,
  hooks: RunnerHooks,
  n: number,
  records: RungRecords,
): { entry: EvidenceRung; failed: string[] } {
  const checks = verifyRung(facts, records);
  const entry = evidenceRung(records, checks);
  const failed = checks.filter((c) => !c.ok);
  const slice = entry.mig ? `MIG ${entry.mig.profile} slice ${entry.mig.card ?? '?'}: ` : '';
  if (failed.length === 0) {
    const s = entry.summary;
    const numbers =
      s?.allreduce === null
        ? `GEMM only, rel err ${s.gemm.max_rel_err === null ? 'n/a' : s.gemm.max_rel_err.toExponential(1)}`
        : `all_reduce ${s?.allreduce.value}/${s?.allreduce.expected}, busbw ${s?.busbw_gbps == null ? 'n/a' : s.busbw_gbps.toFixed(2)} GB/s`;
    hooks.step(n, `${slice}verified: ${checks.length} checks passed (${numbers})`);
  } else {
    hooks.step(n, `${slice}FAILED: ${failed.map((c) => c.name).join(', ')}`);
  }
  return { entry, failed: failed.map((c) => c.name) };
}

/**
 * Runs the ladder's rungs, then the span rung, each driven, settled and judged; after a failed rung the
 * rest are listed as not run. Null when `signal` aborted the run.
 */
async function runLadder(
  o: RunnerOptions,
  hooks: RunnerHooks,
  rung: RungDriver,
  signal: AbortSignal,
  settleTimeoutMs: number,
): Promise<LadderOutcome | null> {
  const rungs: EvidenceRung[] = [];
  const notRun: Array<{ cards: number; reason: string }> = [];
  let stop: string | null = null;
  // The slice rungs first (the smallest hardware), then the whole cards, then a pool's span rung.
  const plan: Array<{
    n: number;
    perNode: number | null;
    slice: { card: string; profile: string | null } | null;
  }> = [
    ...(o.slices ?? []).map((slice) => ({ n: 1, perNode: null, slice })),
    ...o.ladder.map((n) => ({ n, perNode: null, slice: null })),
    ...(o.span ? [{ n: o.span.cards, perNode: o.span.per_node, slice: null }] : []),
  ];
  for (const { n, perNode, slice } of plan) {
    if (signal.aborted) return null;
    const profile = slice?.profile ?? null;
    const gone =
      slice !== null && profile === null
        ? `MIG slice ${slice.card} is no longer reported by the worker (its layout changed)`
        : null;
    if (stop !== null || gone !== null) {
      const reason = stop ?? gone ?? '';
      notRun.push({ cards: n, reason });
      hooks.step(n, `not run: ${reason}`);
      continue;
    }
    if (perNode !== null)
      hooks.step(n, `two-node rung: ${n} GPUs as ${perNode} on each of ${n / perNode} nodes, one Slurm job`);
    if (slice !== null)
      hooks.step(
        n,
        `MIG slice rung: GEMM only on a ${profile} slice (${slice.card} reserved); all_reduce is not offered across MIG instances`,
      );
    const proposalId = await rung.drive(n, perNode, profile);
    if (signal.aborted) return null;
    const records = await settle(
      () => hooks.collectRung(n, perNode, proposalId, profile),
      (r) => rungSettled(r),
      settleTimeoutMs,
      signal,
    );
    const { entry, failed } = judgeRung(o.facts, hooks, n, records);
    rungs.push(entry);
    if (failed.length > 0)
      stop =
        profile === null
          ? `the ${rungLabel(n, perNode)}-card rung failed`
          : `the MIG ${profile} slice rung failed`;
  }
  return { rungs, notRun };
}

/** The sealed evidence document of a finished run. */
function runEvidence(
  o: RunnerOptions,
  ladder: LadderOutcome,
  postChecks: ReturnType<typeof verifyPost>,
  finishedAt: number,
): EvidenceDocument {
  const { facts } = o;
  const { rungs, notRun } = ladder;
  const verdict = verdictOf(
    rungs.map((r) => r.checks),
    postChecks,
    o.skipped.length + notRun.length,
  );
  return sealEvidence({
    schema: EVIDENCE_SCHEMA,
    run_id: facts.run_id,
    verdict,
    worker: {
      worker_id: facts.worker_id,
      hostname: o.worker.hostname,
      provider: o.worker.provider,
      simulated: facts.simulated,
      isolation: facts.isolation?.mode ?? null,
      container_engine: facts.isolation?.container_engine ?? null,
      // Present only for a Slurm pool worker (ADR 0017): its rungs were Slurm jobs, its cards a pool.
      ...(facts.backend === 'slurm' ? { backend: 'slurm' as const } : {}),
    },
    submitter: { kind: o.submitterKind, principal: o.submitter.name, principal_id: facts.submitter_id },
    reviewer: { principal: o.reviewer.name, principal_id: facts.reviewer_id },
    workload: facts.pin,
    ladder: {
      requested: o.requested,
      run: o.ladder,
      ...((o.slices ?? []).length > 0 ? { slices: o.slices } : {}),
      ...(o.span ? { span: o.span } : {}),
      skipped: o.skipped,
      not_run: notRun,
    },
    reserved_cards: facts.reserved_cards,
    started_at: new Date(o.startedAt).toISOString(),
    finished_at: new Date(finishedAt).toISOString(),
    rungs,
    postconditions: postChecks,
    failed_checks: failedChecks(rungs, postChecks),
  });
}

/** Runs the ladder; resolves to the sealed evidence, or null when `signal` aborted the run. */
export async function runQualification(
  o: RunnerOptions,
  hooks: RunnerHooks,
  signal: AbortSignal,
): Promise<EvidenceDocument | null> {
  const now = o.now ?? Date.now;
  const rungTimeoutMs = o.rungTimeoutMs ?? (RUNG_TIME_LIMIT_SECONDS + 300) * 1000;
  const settleTimeoutMs = o.settleTimeoutMs ?? 30_000;
  announceRun(o, hooks);

  const submitter = await connectBrokerMcp(
    o.masterUrl,
    o.submitter.token,
    o.caPem,
    'gpu-broker-qualify-submitter',
  );
  let reviewer: BrokerMcp | null = null;
  try {
    reviewer = await connectBrokerMcp(o.masterUrl, o.reviewer.token, o.caPem, 'gpu-broker-qualify-reviewer');
    const rung = new RungDriver(o, hooks, submitter, reviewer, signal, now, rungTimeoutMs);
    const ladder = await runLadder(o, hooks, rung, signal, settleTimeoutMs);
    if (ladder === null || signal.aborted) return null;
    hooks.step(null, 'checking post-conditions: leases, card states, audit chain');
    const post = await settle(hooks.collectPost, postSettled, settleTimeoutMs, signal);
    const postChecks = verifyPost(post, o.facts);
    const doc = runEvidence(o, ladder, postChecks, now());
    hooks.step(null, `verdict ${doc.verdict}; evidence sha256 ${doc.digest}`);
    return doc;
  } finally {
    await submitter.close();
    await reviewer?.close();
  }
}
