import { BrokerError } from '../../contracts/errors.js';
import { parseVerdict } from '../../domain/review/prompt.js';
import { errorMessage } from '../../platform/error-message.js';
import { type ModelAnswer, runModelProcess } from './model-process.js';
import { agentComment } from './model-reasons.js';

/**
 * The agent reviewer's loop (ADR 0027), independent of how it reaches the master: for each queued
 * revision not its own and not already waiting for a person, read the reviewer prompt, give it to the
 * model command on stdin, read one verdict from its stdout, and submit it. Fail-closed at every step:
 * no verdict, a malformed one, a timeout, a crash, a digest mismatch, or an APPROVE of a prompt that
 * was not complete is NO decision (the revision stays in review for a person), never an approval and
 * never an automatic REQUEST_CHANGES. The broker still bounds every APPROVE by the ceiling.
 */

/** What the loop needs from the master (REST in the CLI, the MCP SDK client in the tests). */
export interface ReviewPort {
  queue(): Promise<QueueEntry[]>;
  prompt(proposalId: string, revisionId: string): Promise<PromptAnswer>;
  submit(r: {
    proposal_id: string;
    revision_id: string;
    revision_digest: string;
    decision: string;
    comments: string;
  }): Promise<{ state: string }>;
}

/** The parts of a review queue item the loop reads. */
export interface QueueEntry {
  proposal_id: string;
  revision_id: string;
  digest: string;
  own: boolean;
  needs_person: unknown;
}

/** The parts of get_review_prompt's answer the loop reads. */
export interface PromptAnswer {
  revision_digest: string;
  complete: boolean;
  prompt: string;
}

/** What happened to one revision. */
export interface LoopOutcome {
  proposal_id: string;
  revision_id: string;
  outcome: 'APPROVED' | 'CHANGES_REQUESTED' | 'REJECTED' | 'NEEDS_PERSON' | 'NO_DECISION' | 'ERROR';
  reason: string;
}

/** Runs the model: the prompt on stdin, its stdout (or null and why it gave none). */
export type ModelRunner = (prompt: string) => Promise<ModelAnswer>;

/** Environment names never passed to the model: it must not hold the reviewer's token. */
const WITHHELD_ENV = /^GPU_BROKER_(TOKEN|TOKEN_FILE)$/;

/**
 * A ModelRunner for a shell command (`/bin/sh -c`) in this process's cwd, with `env` less the reviewer
 * token, killed with its process group after `timeoutMs`. Not sandboxed: for tests and the corpus run
 * (test/integration/master/agent-review-corpus.test.ts); `review agent` runs the model through
 * model-sandbox.ts.
 */
export function shellModel(
  command: string,
  timeoutMs: number,
  env: Record<string, string | undefined>,
): ModelRunner {
  const childEnv = Object.fromEntries(
    Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined && !WITHHELD_ENV.test(e[0])),
  );
  return (prompt) =>
    runModelProcess({ file: '/bin/sh', args: ['-c', command], env: childEnv, cwd: '.', timeoutMs }, prompt);
}

const STATE_OUTCOME: Record<string, LoopOutcome['outcome']> = {
  APPROVED: 'APPROVED',
  CHANGES_REQUESTED: 'CHANGES_REQUESTED',
  REJECTED: 'REJECTED',
};

/**
 * One revision: prompt → model → verdict → comment → submit. `secrets` are the tokens the loop holds
 * (the reviewer's): reasons carrying one, or anything token-shaped, are no decision (model-reasons.ts).
 */
export async function reviewOne(
  port: ReviewPort,
  model: ModelRunner,
  e: QueueEntry,
  secrets: readonly string[] = [],
): Promise<LoopOutcome> {
  const base = { proposal_id: e.proposal_id, revision_id: e.revision_id };
  try {
    const p = await port.prompt(e.proposal_id, e.revision_id);
    const ran = await model(p.prompt);
    if (ran.stdout === null) return { ...base, outcome: 'NO_DECISION', reason: `model: ${ran.reason}` };
    const v = parseVerdict(ran.stdout, p.revision_digest);
    if (!v.ok) return { ...base, outcome: 'NO_DECISION', reason: v.reason };
    if (v.verdict.decision === 'APPROVE' && !p.complete)
      return {
        ...base,
        outcome: 'NO_DECISION',
        reason: 'APPROVE of a prompt that did not hold every submitted byte',
      };
    const comment = agentComment(v.verdict.reasons, secrets);
    if (!comment.ok) return { ...base, outcome: 'NO_DECISION', reason: comment.reason };
    const out = await port.submit({
      ...base,
      revision_digest: p.revision_digest,
      decision: v.verdict.decision,
      comments: comment.comment,
    });
    return { ...base, outcome: STATE_OUTCOME[out.state] ?? 'ERROR', reason: comment.shown };
  } catch (err) {
    if (err instanceof BrokerError && err.code === 'NEEDS_PERSON')
      return { ...base, outcome: 'NEEDS_PERSON', reason: err.message };
    return { ...base, outcome: 'ERROR', reason: errorMessage(err) };
  }
}

/** One pass over the queue, skipping own revisions, flagged ones and those in `seen` (then added). */
export async function reviewPass(
  port: ReviewPort,
  model: ModelRunner,
  seen = new Set<string>(),
  secrets: readonly string[] = [],
): Promise<LoopOutcome[]> {
  const out: LoopOutcome[] = [];
  for (const e of await port.queue()) {
    if (e.own || e.needs_person !== null || seen.has(e.revision_id)) continue;
    seen.add(e.revision_id);
    out.push(await reviewOne(port, model, e, secrets));
  }
  return out;
}
