import { randomBytes } from 'node:crypto';
import { LIMIT_NAMES } from '../../contracts/task-limits.js';
import { DEFAULT_PROMPT_BYTES } from '../../contracts/tools-agent-review.js';
import { quoteUntrusted } from '../../domain/policy/untrusted.js';
import {
  buildReviewPrompt,
  type FactValue,
  factWord,
  type PromptSection,
} from '../../domain/review/prompt.js';
import type { Principal } from '../../store/principals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { verifiedBlob } from '../verified-blob.js';
import { agentCeilingFailure } from './agent-review.js';
import { isText } from './inputs.js';
import { loadVisibleProposal } from './proposals.js';
import { getRevision } from './reviews.js';
import { getTaskLogs } from './task-results.js';

/**
 * get_review_prompt (ADR 0027): one revision as the prompt an LLM reviewer reads. gpu-broker's facts
 * are computed here from the parsed spec, the findings and the diff; everything the submitter wrote goes
 * to the fenced block (src/domain/review/prompt.ts). The nonce is 128 random bits drawn per call.
 */

type RevisionView = Awaited<ReturnType<typeof getRevision>>;

/** Ceiling as the prompt states it: within or above, and the first failing clause's name. */
interface CeilingView {
  within: boolean;
  clause: string | null;
  reason: string | null;
}

/**
 * The facts block (docs/security.md "What a reviewer must read, and what the broker guarantees"): numbers, ids the broker made, digests, enum values, finding codes
 * and clause names only. Whatever the submitter chose (argv, image, mount names, env, paths, the spec
 * paths a diff names, finding messages, the ceiling's reason, principal names) is in submittedFacts.
 */
function factsOf(v: RevisionView, ceiling: CeilingView, unreadable: number) {
  const spec = v.revision.spec;
  const changes = v.input_changes;
  const count = (c: string) => changes.filter((x) => x.change === c).length;
  const lines = (k: 'added_lines' | 'removed_lines') =>
    changes.reduce((n, x) => n + (x.text_diff?.[k] ?? 0), 0);
  const limits = v.revision.sandbox.limits;
  const facts: Array<readonly [string, FactValue]> = [
    ['proposal_id', factWord(v.proposal_id)],
    ['proposal_state', factWord(v.proposal_state)],
    ['revision', v.revision.number],
    ['revision_id', factWord(v.revision.revision_id)],
    ['current', v.revision.current],
    ['revision_digest', factWord(v.revision.digest)],
    ['runtime', factWord(v.revision.sandbox.runtime)],
    ['image pinned by digest', v.revision.sandbox.image !== null],
    ['argv items', spec.runtime.argv.length],
    ['env names', Object.keys(spec.runtime.env ?? {}).length],
    ['cards', spec.cards.count],
    ['time_limit_seconds', spec.time_limit_seconds],
    ['network', factWord(v.revision.sandbox.network)],
    ['mounts', spec.mounts?.length ?? 0],
    ...LIMIT_NAMES.map((n) => [`limits.${n}`, limits[n]] as const),
    ['inputs', v.inputs.length],
    ['input bytes', v.inputs.reduce((n, i) => n + i.size, 0)],
    ['inputs not shown', unreadable],
    ...diffBaseFacts(v),
    ['revisions since the base no person read', v.unreviewed_between.length],
    [
      'of them decided by an agent reviewer',
      v.unreviewed_between.filter((u) => u.kind === 'agent_reviewer').length,
    ],
    ['of them approved by a grant', v.unreviewed_between.filter((u) => u.kind === 'grant').length],
    ['inputs added', count('added')],
    ['inputs removed', count('removed')],
    ['inputs modified', count('modified')],
    ['lines added', lines('added_lines')],
    ['lines removed', lines('removed_lines')],
    ['spec fields changed', v.diff.length],
    ...v.revision.findings.flatMap((f, i) => [
      [`finding ${i + 1}`, factWord(f.code)] as const,
      [`finding ${i + 1} severity`, factWord(f.severity)] as const,
    ]),
    ['findings', v.revision.findings.length],
    ['agent_ceiling', factWord(ceiling.within ? 'within' : 'above')],
    ...(ceiling.clause === null ? [] : [['agent_ceiling clause', factWord(ceiling.clause)] as const]),
  ];
  return facts;
}

/** The diff base as facts: its number and the decision on it, or none. */
function diffBaseFacts(v: RevisionView): Array<readonly [string, FactValue]> {
  const b = v.diff_base;
  if (!b) return [['diff base', factWord('none')]];
  return [
    ['diff base', b.number],
    ['diff base decision', factWord(b.decision)],
    ['diff base decided by', factWord(b.kind)],
  ];
}

/**
 * What the facts leave out because a submitter chose it, as sections of the fenced block: executable
 * and image, mount names, the owner's name, the spec paths that changed, each finding's path and
 * message, and the ceiling's reason (it quotes submitted values such as the executable).
 */
function submittedFacts(v: RevisionView, ceiling: CeilingView): PromptSection[] {
  const spec = v.revision.spec;
  const findings = v.revision.findings.map((f, i) => `finding ${i + 1} at ${f.path}: ${f.message}`);
  return [
    { label: 'owner (principal name)', text: v.owner },
    { label: 'who decided the diff base (principal name)', text: v.diff_base?.decided_by ?? '' },
    { label: 'executable (argv[0])', text: spec.runtime.argv[0] ?? '' },
    { label: 'image', text: v.revision.sandbox.image ?? '' },
    { label: 'mounts (one per line)', text: (spec.mounts ?? []).join('\n') },
    {
      label: 'spec fields changed since the diff base (one per line)',
      text: v.diff.map((d) => d.path).join('\n'),
    },
    {
      label: 'finding details (computed by gpu-broker; they quote submitted values)',
      text: findings.join('\n'),
    },
    {
      label: 'agent ceiling reason (computed by gpu-broker; it quotes submitted values)',
      text: ceiling.reason ?? '',
    },
  ];
}

/** The spec's own text fields and values, each as one section. */
function specSections(v: RevisionView): PromptSection[] {
  const spec = v.revision.spec;
  const env = Object.entries(spec.runtime.env ?? {}).map(([k, val]) => `${k}=${val}`);
  return [
    { label: 'title', text: spec.title },
    { label: 'objective', text: spec.objective },
    { label: 'success_criteria', text: spec.success_criteria },
    { label: 'notes', text: spec.notes ?? '' },
    { label: 'argv (one item per line)', text: spec.runtime.argv.join('\n') },
    { label: 'env (NAME=VALUE per line)', text: env.join('\n') },
    { label: 'input paths', text: v.inputs.map((i) => i.path).join('\n') },
    { label: 'output paths', text: spec.outputs.map((o) => o.path).join('\n') },
  ];
}

/**
 * Each input file in full (text) or a note that it is binary or beyond the byte budget, then each text
 * diff. A file is read only while the files read so far fit `maxBytes`: a prompt for a revision with a
 * 1 GiB input never loads it (the ceiling's max_input_bytes keeps such a revision from an agent anyway).
 */
function fileSections(
  deps: BrokerDeps,
  ownerId: string,
  v: RevisionView,
  maxBytes: number,
): { sections: PromptSection[]; unreadable: number } {
  const sections: PromptSection[] = [];
  let unreadable = 0;
  let left = maxBytes;
  for (const i of v.inputs) {
    const path = quoteUntrusted(i.path, 512);
    if (i.size > left) {
      unreadable++;
      sections.push({ label: `file ${path} (${i.size} bytes): beyond max_bytes, not shown`, text: '' });
      continue;
    }
    const content = verifiedBlob(deps, ownerId, i.sha256);
    left -= i.size;
    if (isText(content))
      sections.push({
        label: `file ${path} (${i.size} bytes${i.executable === true ? ', executable' : ''})`,
        text: content.toString('utf8'),
      });
    else {
      unreadable++;
      sections.push({ label: `file ${path} (${i.size} bytes): binary, not shown`, text: '' });
    }
  }
  for (const c of v.input_changes)
    if (c.text_diff)
      sections.push({
        label: `diff of ${quoteUntrusted(c.path, 512)} against the diff base`,
        text: c.text_diff.unified,
      });
  return { sections, unreadable };
}

/** Earlier review comments, and the log tails of the owner's latest task (written by its program). */
function historySections(
  deps: BrokerDeps,
  principal: Principal,
  ownerId: string,
  v: RevisionView,
): PromptSection[] {
  const out: PromptSection[] = v.reviews.map((r) => ({
    label: `review comment by ${quoteUntrusted(r.reviewer, 64)} (${r.decision} on ${r.revision_id})`,
    text: r.comments,
  }));
  const last = deps.store.tasks.list({ owner_id: ownerId, limit: 1 })[0];
  if (last)
    for (const stream of ['stdout', 'stderr'] as const) {
      const log = getTaskLogs(deps, principal, {
        task_id: last.id,
        stream,
        tail_lines: 40,
        max_bytes: 16384,
      });
      if (log.data.length > 0)
        out.push({
          label: `earlier log: ${stream} of the owner's latest task ${last.id} (${last.state}), last 40 lines`,
          text: log.data,
        });
    }
  return out;
}

/** get_review_prompt. */
export async function getReviewPrompt(
  deps: BrokerDeps,
  principal: Principal,
  q: { proposal_id: string; revision_id?: string | undefined; max_bytes?: number | undefined },
) {
  const p = loadVisibleProposal(deps, principal, q.proposal_id);
  const v = await getRevision(deps, principal, p.id, q.revision_id ?? p.current_revision_id);
  const record = deps.store.proposals.revision(v.revision.revision_id)!;
  const failure = agentCeilingFailure(deps, p, record);
  const ceiling = {
    within: failure === null,
    clause: failure?.clause ?? null,
    reason: failure?.reason ?? null,
  };
  const maxBytes = q.max_bytes ?? DEFAULT_PROMPT_BYTES;
  const files = fileSections(deps, p.owner_id, v, maxBytes);
  const nonce = randomBytes(16).toString('hex');
  const { prompt, complete } = buildReviewPrompt({
    nonce,
    digest: v.revision.digest,
    facts: factsOf(v, ceiling, files.unreadable),
    sections: [
      ...submittedFacts(v, ceiling),
      ...specSections(v),
      ...files.sections,
      ...historySections(deps, principal, p.owner_id, v),
    ],
    maxBytes,
    unreadable: files.unreadable > 0,
  });
  return {
    proposal_id: p.id,
    revision_id: v.revision.revision_id,
    revision_digest: v.revision.digest,
    nonce,
    complete,
    agent_ceiling: ceiling,
    prompt,
  };
}
