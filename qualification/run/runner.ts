import { join } from 'node:path';
import type { ProposalView, TaskView } from '../../src/contracts/views.js';
import { rungLabel, type SpanRung } from '../../src/domain/qualification-ladder.js';
import { digestOf } from '../../src/platform/digest.js';
import {
  EVIDENCE_SCHEMA,
  type EvidenceDocument,
  type EvidenceRung,
  evidenceRung,
  failedChecks,
  sealEvidence,
} from '../verify/evidence.js';
import {
  type PostRecords,
  type RunFacts,
  type RungRecords,
  verdictOf,
  verifyPost,
  verifyRung,
} from '../verify/verifier.js';
import { qualificationSpec, RUNG_TIME_LIMIT_SECONDS } from '../workload/spec.js';
import { type AgentKind, agentPrompt, runAgent } from './agent-submitter.js';
import { type BrokerMcp, connectBrokerMcp } from './mcp-client.js';
import { describeTask, postSettled, rungSettled, settle } from './runner-settle.js';

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

/** What the runner needs from the master's side. */
export interface RunnerHooks {
  /** Records a progress line (cards null: a run-level step). */
  step(cards: number | null, text: string): void;
  /** What the master recorded for a rung (perNode: a span rung's; proposal null: nothing was proposed). */
  collectRung(cards: number, perNode: number | null, proposalId: string | null): RungRecords;
  /** The post-conditions, as the master sees them now. */
  collectPost(): PostRecords;
}

/** A principal the runner acts as. */
export interface ActingPrincipal {
  name: string;
  token: string;
}

/** Everything one run needs. */
export interface RunnerOptions {
  facts: RunFacts;
  requested: number[];
  /** The counts to run, ascending. */
  ladder: number[];
  /** A Slurm pool's two-node rung, run after the ladder (ADR 0017); null or absent: none. */
  span?: SpanRung | null;
  skipped: Array<{ cards: number; reason: string }>;
  worker: { hostname: string | null; provider: string | null };
  submitterKind: 'scripted' | AgentKind;
  submitter: ActingPrincipal;
  reviewer: ActingPrincipal;
  /** The master's base URL and the CA that signed its certificate (null: publicly trusted or plain HTTP). */
  masterUrl: string;
  caPem: string | null;
  caFile: string | null;
  /** For claude/codex: a client kit for this master, a scratch dir, the agent's environment. */
  agent?: {
    kitDir: string;
    workDir: string;
    env: Readonly<Record<string, string | undefined>>;
    timeoutMs: number;
  };
  startedAt: number;
  /** Longest a rung may take from proposal to settled task (default: the spec's time limit + 5 min). */
  rungTimeoutMs?: number;
  /** Longest to wait for leases and cards to settle after a rung or the ladder (default 30 s). */
  settleTimeoutMs?: number;
  now?: () => number;
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
  const { facts } = o;
  hooks.step(
    null,
    `qualifying ${facts.worker_id}: ladder ${o.ladder.join(',') || 'none'}${o.span ? ` then ${o.span.cards} cards across 2 nodes (${o.span.per_node} per node)` : ''}; cards ${facts.reserved_cards.join(',') || 'none'} cordoned for the run; submitter ${o.submitterKind} as ${o.submitter.name}, reviewer ${o.reviewer.name}`,
  );
  for (const s of o.skipped) hooks.step(s.cards, `skipped: ${s.reason}`);

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
    const rungs: EvidenceRung[] = [];
    const notRun: Array<{ cards: number; reason: string }> = [];
    let stop: string | null = null;
    const plan: Array<{ n: number; perNode: number | null }> = [
      ...o.ladder.map((n) => ({ n, perNode: null })),
      ...(o.span ? [{ n: o.span.cards, perNode: o.span.per_node }] : []),
    ];
    for (const { n, perNode } of plan) {
      if (signal.aborted) return null;
      if (stop !== null) {
        notRun.push({ cards: n, reason: stop });
        hooks.step(n, `not run: ${stop}`);
        continue;
      }
      if (perNode !== null)
        hooks.step(
          n,
          `two-node rung: ${n} GPUs as ${perNode} on each of ${n / perNode} nodes, one Slurm job`,
        );
      const proposalId = await rung.drive(n, perNode);
      if (signal.aborted) return null;
      const records = await settle(
        () => hooks.collectRung(n, perNode, proposalId),
        (r) => rungSettled(r),
        settleTimeoutMs,
        signal,
      );
      const checks = verifyRung(facts, records);
      const entry = evidenceRung(records, checks);
      rungs.push(entry);
      const failed = checks.filter((c) => !c.ok);
      if (failed.length === 0) {
        const s = entry.summary;
        hooks.step(
          n,
          `verified: ${checks.length} checks passed (all_reduce ${s?.allreduce.value}/${s?.allreduce.expected}, busbw ${s?.busbw_gbps === null ? 'n/a' : s?.busbw_gbps.toFixed(2)} GB/s)`,
        );
      } else {
        hooks.step(n, `FAILED: ${failed.map((c) => c.name).join(', ')}`);
        stop = `the ${rungLabel(n, perNode)}-card rung failed`;
      }
    }
    if (signal.aborted) return null;
    hooks.step(null, 'checking post-conditions: leases, card states, audit chain');
    const post = await settle(hooks.collectPost, postSettled, settleTimeoutMs, signal);
    const postChecks = verifyPost(post, facts);
    const verdict = verdictOf(
      rungs.map((r) => r.checks),
      postChecks,
      o.skipped.length + notRun.length,
    );
    const doc = sealEvidence({
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
        ...(o.span ? { span: o.span } : {}),
        skipped: o.skipped,
        not_run: notRun,
      },
      reserved_cards: facts.reserved_cards,
      started_at: new Date(o.startedAt).toISOString(),
      finished_at: new Date(now()).toISOString(),
      rungs,
      postconditions: postChecks,
      failed_checks: failedChecks(rungs, postChecks),
    });
    hooks.step(null, `verdict ${verdict}; evidence sha256 ${doc.digest}`);
    return doc;
  } finally {
    await submitter.close();
    await reviewer?.close();
  }
}

/** Drives one rung through MCP: propose (or have the agent propose), review, wait for the task. */
class RungDriver {
  /** Proposals already used by earlier rungs (an agent's leftovers must not be picked twice). */
  private readonly used = new Set<string>();

  constructor(
    private readonly o: RunnerOptions,
    private readonly hooks: RunnerHooks,
    private readonly submitter: BrokerMcp,
    private readonly reviewer: BrokerMcp,
    private readonly signal: AbortSignal,
    private readonly now: () => number,
    private readonly timeoutMs: number,
  ) {}

  /** Returns the rung's proposal id (null if none was made). Errors end the rung; the verifier judges. */
  async drive(n: number, perNode: number | null): Promise<string | null> {
    const { facts } = this.o;
    const spec = qualificationSpec(facts.run_id, facts.worker_id, n, facts.pin, perNode);
    const digest = digestOf(spec);
    // Idempotency keys name the rung, not only its count: a span rung may have an in-node rung's count.
    const key = rungLabel(n, perNode);
    let proposalId: string | null = null;
    try {
      proposalId =
        this.o.submitterKind === 'scripted'
          ? await this.proposeScripted(n, key, spec)
          : await this.proposeByAgent(n, key, spec, digest);
      if (proposalId === null) return null;
      this.used.add(proposalId);
      const taskId = await this.review(n, key, proposalId, digest);
      if (taskId !== null) await this.follow(n, key, taskId);
    } catch (err) {
      this.hooks.step(n, `error: ${(err as Error).message}`);
    }
    return proposalId;
  }

  private async proposeScripted(
    n: number,
    key: string,
    spec: ReturnType<typeof qualificationSpec>,
  ): Promise<string | null> {
    const runId = this.o.facts.run_id;
    this.hooks.step(n, `proposing the workload as ${this.o.submitter.name} (scripted MCP client)`);
    const created = await this.submitter.call<{
      proposal_id: string;
      revision_id: string;
      confirmable: boolean;
    }>('create_proposal', { spec, idempotency_key: `${runId}-${key}-create` });
    if (!created.confirmable) {
      this.hooks.step(n, `proposal ${created.proposal_id} has error findings; not confirmed`);
      return created.proposal_id;
    }
    await this.submitter.call('confirm_revision', {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      idempotency_key: `${runId}-${key}-confirm`,
    });
    this.hooks.step(n, `proposal ${created.proposal_id} confirmed; in review`);
    return created.proposal_id;
  }

  private async proposeByAgent(
    n: number,
    key: string,
    spec: ReturnType<typeof qualificationSpec>,
    digest: string,
  ): Promise<string | null> {
    const agent = this.o.agent;
    const kind = this.o.submitterKind as AgentKind;
    if (agent === undefined) throw new Error(`no agent settings for the ${kind} submitter`);
    this.hooks.step(n, `launching ${kind} non-interactively with the client kit's MCP configuration`);
    const outcome = await runAgent({
      kind,
      kitDir: agent.kitDir,
      workDir: join(agent.workDir, `${kind}-${key}`),
      token: this.o.submitter.token,
      caFile: this.o.caFile,
      prompt: agentPrompt(this.o.facts.run_id, key, spec),
      env: agent.env,
      timeoutMs: agent.timeoutMs,
      signal: this.signal,
    });
    const how = outcome.timed_out
      ? 'was stopped at its time limit'
      : `exited with ${outcome.exit_code ?? outcome.signal ?? 'an error'}`;
    this.hooks.step(
      n,
      `${kind} ${how}${outcome.exit_code === 0 ? '' : `: ${outcome.stderr_tail.trim().slice(-200)}`}`,
    );
    // Whatever the agent said, only the master's records count: find its proposal there.
    const listed = await this.submitter.call<{ proposals: Array<{ proposal_id: string; state: string }> }>(
      'list_proposals',
      { limit: 50 },
    );
    const fresh = listed.proposals.filter((p) => !this.used.has(p.proposal_id));
    let fallback: string | null = null;
    for (const p of fresh) {
      if (p.state !== 'IN_REVIEW') continue;
      const view = await this.submitter.call<{ proposal: ProposalView }>('get_proposal', {
        proposal_id: p.proposal_id,
      });
      if (view.proposal.current_revision.digest === digest) {
        this.hooks.step(n, `found proposal ${p.proposal_id} in review with the expected digest`);
        return p.proposal_id;
      }
      fallback ??= p.proposal_id;
    }
    const chosen = fallback ?? fresh[0]?.proposal_id ?? null;
    this.hooks.step(
      n,
      chosen === null
        ? `${kind} left no proposal on the master`
        : `${kind} left no proposal in review with the expected spec; judging ${chosen}`,
    );
    return chosen;
  }

  /** The reviewer approves exactly the workload spec, and rejects anything else. Returns the task id. */
  private async review(n: number, key: string, proposalId: string, digest: string): Promise<string | null> {
    const { proposal } = await this.reviewer.call<{ proposal: ProposalView }>('get_proposal', {
      proposal_id: proposalId,
    });
    if (proposal.state !== 'IN_REVIEW') {
      this.hooks.step(n, `proposal ${proposalId} is ${proposal.state}, not in review; nothing to approve`);
      return null;
    }
    const revisionId = proposal.current_revision.revision_id;
    const { revision } = await this.reviewer.call<{ revision: { spec: unknown; digest: string } }>(
      'get_revision',
      {
        proposal_id: proposalId,
        revision_id: revisionId,
      },
    );
    const runId = this.o.facts.run_id;
    const exact = revision.digest === digest && digestOf(revision.spec) === digest;
    const decided = await this.reviewer.call<{ task_id: string | null }>('submit_review', {
      proposal_id: proposalId,
      revision_id: revisionId,
      revision_digest: revision.digest,
      decision: exact ? 'APPROVE' : 'REJECT',
      comments: exact
        ? `Qualification run ${runId}: the revision is exactly the pinned workload spec for ${n} card(s) (digest ${digest}).`
        : `Qualification run ${runId}: the revision (digest ${revision.digest}) is not the workload spec for ${n} card(s) (digest ${digest}).`,
      idempotency_key: `${runId}-${key}-review`,
    });
    this.hooks.step(
      n,
      exact
        ? `approved by ${this.o.reviewer.name} (revision ${revisionId}); task ${decided.task_id} queued`
        : `rejected by ${this.o.reviewer.name}: the revision is not the workload spec`,
    );
    return decided.task_id;
  }

  /** Follows the task until it settles, reporting each state change; cancels it at the rung's limit. */
  private async follow(n: number, key: string, taskId: string): Promise<void> {
    const deadline = this.now() + this.timeoutMs;
    let last = '';
    for (;;) {
      const { task, timed_out } = await this.submitter.call<{ task: TaskView; timed_out: boolean }>(
        'wait_for_task',
        {
          task_id: taskId,
          // Short waits, so a state change shows as a step soon; it returns at once when the task settles.
          timeout_seconds: 1,
        },
      );
      const line = describeTask(task);
      if (line !== last) this.hooks.step(n, line);
      last = line;
      if (!timed_out || this.signal.aborted) return;
      if (this.now() > deadline) {
        this.hooks.step(
          n,
          `task ${taskId} did not finish within ${Math.round(this.timeoutMs / 1000)} s; cancelling it`,
        );
        await this.submitter
          .call('cancel_task', { task_id: taskId, idempotency_key: `${this.o.facts.run_id}-${key}-cancel` })
          .catch(() => undefined);
        return;
      }
    }
  }
}
