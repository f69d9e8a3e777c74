import { join } from 'node:path';
import type { ProposalView, TaskView } from '../../src/contracts/views.js';
import { rungLabel } from '../../src/domain/qualification/ladder.js';
import { digestOf } from '../../src/platform/digest.js';
import { qualificationSpec } from '../workload/spec.js';
import { type AgentKind, agentPrompt, runAgent } from './agent-submitter.js';
import type { BrokerMcp } from './mcp-client.js';
import type { RunnerHooks, RunnerOptions } from './runner-options.js';
import { describeTask } from './runner-settle.js';

/** Drives one rung through MCP: propose (or have the agent propose), review, wait for the task. */
export class RungDriver {
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
  async drive(n: number, perNode: number | null, migProfile: string | null = null): Promise<string | null> {
    const { facts } = this.o;
    const spec = qualificationSpec(facts.run_id, facts.worker_id, n, facts.pin, perNode, migProfile);
    const digest = digestOf(spec);
    // Idempotency keys name the rung, not only its count: a span rung may have an in-node rung's count,
    // and a slice rung is a single-card rung of its profile.
    const key = rungLabel(n, perNode, migProfile);
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
