import type { AgentCeiling } from '../../contracts/agent-ceiling.js';
import type { Policy } from '../../contracts/policy.js';
import { LIMIT_NAMES, type ResolvedLimits } from '../../contracts/task-limits.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import { DEFAULT_PROMPT_BYTES } from '../../contracts/tools-agent-review.js';
import { resolveLimits } from '../policy/task-limits.js';
import type { Finding } from '../policy/types.js';
import { quoteList, quoteUntrusted } from '../policy/untrusted.js';

/**
 * What an agent reviewer may approve (docs/decisions/0027-agent-reviewer.md). Pure: the
 * facts of one revision against the operator's ceiling, as a table of clauses checked in order. The
 * first failing clause is what the refusal names ("cards 8 > 1"). Every fact comes from the spec as the
 * broker parsed it and from the broker's own findings, never from text the submitter wrote about it:
 * a title saying "the ceiling is 8 cards" changes no fact below.
 */

/** The facts of a revision the ceiling reads. */
export interface CeilingFacts {
  /** The proposal's owner holds the agent_reviewer role (an agent never approves an agent's work). */
  owner_is_agent_reviewer: boolean;
  findings: ReadonlyArray<Pick<Finding, 'severity' | 'code'>>;
  network: 'none' | 'host';
  mounts: readonly string[];
  runtime: 'process' | 'container';
  image: string | null;
  executable: string;
  cards: number;
  /** The MIG ask: a profile (`cards.mig_profile`), `any` (`cards.allow_mig`), or null (whole cards). */
  mig?: string | null;
  time_limit_seconds: number;
  limits: ResolvedLimits;
  /** The spec's `limits.cpus` (a share of its host's CPUs held while it runs); null: none asked. */
  cpus?: number | null;
  /** The policy's per-card defaults times the cards: the cap of a limit the ceiling leaves out. */
  default_limits: ResolvedLimits;
  input_bytes: number;
  /** Whether a reviewer prompt can show the whole revision (clause `readable`); see readableFacts. */
  readable: ReadableFacts;
}

/**
 * What the broker found when it read the revision as `get_review_prompt` shows it (docs/security.md "Code the reviewer did not read"): a binary
 * input, or more material than a prompt quotes, makes the review material incomplete, and no agent may
 * approve an incomplete revision, whether its decision comes through `gpu-broker review agent` (which
 * also refuses a prompt that is not `complete`) or straight over MCP `submit_review`.
 */
export interface ReadableFacts {
  /** Bytes of the revision a prompt must quote: the spec's text fields and every input (reviewMaterialBytes). */
  bytes: number;
  /** What a prompt quotes by default (DEFAULT_PROMPT_BYTES), so "complete" means the same in both places. */
  budget: number;
  /** Input paths whose bytes are not text (isText: valid UTF-8, no NUL), in manifest order; read only within the budget. */
  not_text: readonly string[];
}

/** One failing clause: its name and the sentence a person reads. */
export interface CeilingFailure {
  clause: CeilingClause;
  reason: string;
}

/** The clauses, in the order they are checked. */
export const CEILING_CLAUSES = [
  'owner',
  'errors',
  'warnings',
  'network',
  'mounts',
  'runtime',
  'image',
  'executable',
  'cards',
  'mig',
  'time_limit',
  'limits',
  'inputs',
  'readable',
] as const;
/** A clause name. */
export type CeilingClause = (typeof CEILING_CLAUSES)[number];

type Check = (f: CeilingFacts, c: AgentCeiling) => string | null;

/** Each clause: null when it holds, else why not. */
const CHECKS: Readonly<Record<CeilingClause, Check>> = {
  owner: (f) => (f.owner_is_agent_reviewer ? 'the proposal was submitted by an agent reviewer' : null),
  errors: (f) => {
    const codes = f.findings.filter((x) => x.severity === 'error').map((x) => x.code);
    return codes.length > 0 ? `error findings ${codes.join(', ')}` : null;
  },
  warnings: (f, c) => {
    const codes = f.findings
      .filter((x) => x.severity === 'warning' && !c.allowed_warnings.includes(x.code))
      .map((x) => x.code);
    return codes.length > 0 ? `warning findings ${codes.join(', ')} not in allowed_warnings` : null;
  },
  network: (f) => (f.network === 'none' ? null : `network ${f.network} is not none`),
  mounts: (f) => (f.mounts.length === 0 ? null : `mounts ${f.mounts.length} > 0`),
  runtime: (f, c) =>
    c.runtimes.includes(f.runtime) ? null : `runtime ${f.runtime} not in [${c.runtimes.join(', ')}]`,
  image: (f, c) =>
    f.runtime !== 'container' || (f.image !== null && c.images.includes(f.image))
      ? null
      : `image ${quoteUntrusted(f.image ?? '')} is not one of the ${c.images.length} pinned image(s) of the ceiling`,
  executable: (f, c) =>
    c.executables === null || c.executables.includes(f.executable)
      ? null
      : `executable ${quoteUntrusted(f.executable)} is not in the ceiling's executables`,
  cards: (f, c) => (f.cards <= c.max_cards ? null : `cards ${f.cards} > ${c.max_cards}`),
  mig: (f, c) => {
    const mig = f.mig ?? null;
    if (mig === null || c.mig_profiles === null || c.mig_profiles.includes(mig)) return null;
    const allowed = `the ceiling's mig_profiles [${c.mig_profiles.join(', ')}]`;
    return mig === 'any'
      ? `cards.allow_mig takes a slice of any profile, beyond ${allowed}`
      : `MIG profile ${quoteUntrusted(mig)} is not in ${allowed}`;
  },
  time_limit: (f, c) =>
    f.time_limit_seconds <= c.max_time_limit_seconds
      ? null
      : `time_limit_seconds ${f.time_limit_seconds} > ${c.max_time_limit_seconds}`,
  limits: (f, c) => {
    for (const name of LIMIT_NAMES) {
      const cap = c.max_limits[name] ?? f.default_limits[name];
      if (f.limits[name] > cap) return `limits.${name} ${f.limits[name]} > ${cap}`;
    }
    const cpus = f.cpus ?? null;
    if (cpus !== null && c.max_limits.cpus === undefined)
      return `limits.cpus ${cpus} asked; the ceiling sets no max_limits.cpus`;
    if (cpus !== null && c.max_limits.cpus !== undefined && cpus > c.max_limits.cpus)
      return `limits.cpus ${cpus} > ${c.max_limits.cpus}`;
    return null;
  },
  inputs: (f, c) =>
    f.input_bytes <= c.max_input_bytes ? null : `input bytes ${f.input_bytes} > ${c.max_input_bytes}`,
  readable: (f) =>
    f.readable.bytes > f.readable.budget
      ? `review material ${f.readable.bytes} bytes > ${f.readable.budget} a prompt shows`
      : f.readable.not_text.length > 0
        ? `input(s) not text, a prompt cannot show them: ${quoteList(f.readable.not_text)}`
        : null,
};

/** Every failing clause, in table order (empty: an agent reviewer may approve). */
export function ceilingFailures(facts: CeilingFacts, ceiling: AgentCeiling): CeilingFailure[] {
  const out: CeilingFailure[] = [];
  for (const clause of CEILING_CLAUSES) {
    const reason = CHECKS[clause](facts, ceiling);
    if (reason !== null) out.push({ clause, reason });
  }
  return out;
}

/** The first failing clause, or null when the revision is within the ceiling. */
export function firstCeilingFailure(facts: CeilingFacts, ceiling: AgentCeiling): CeilingFailure | null {
  return ceilingFailures(facts, ceiling)[0] ?? null;
}

/** The facts of a spec as the broker parsed it, with its findings and the policy's defaults. */
export function ceilingFacts(
  spec: TaskSpec,
  findings: readonly Finding[],
  policy: Policy,
  ownerIsAgentReviewer: boolean,
  readable: ReadableFacts,
): CeilingFacts {
  const cards = spec.cards.count;
  const limits = resolveLimits(spec, policy);
  const defaults = resolveLimits({ cards: spec.cards }, policy);
  return {
    owner_is_agent_reviewer: ownerIsAgentReviewer,
    findings,
    network: spec.network ?? 'none',
    mounts: spec.mounts ?? [],
    runtime: spec.runtime.kind,
    image: spec.runtime.kind === 'container' ? spec.runtime.image : null,
    executable: spec.runtime.argv[0] ?? '',
    cards,
    mig: spec.cards.mig_profile ?? (spec.cards.allow_mig === true ? 'any' : null),
    time_limit_seconds: spec.time_limit_seconds,
    limits,
    cpus: spec.limits?.cpus ?? null,
    default_limits: defaults,
    input_bytes: (spec.inputs ?? []).reduce((n, i) => n + i.size, 0),
    readable,
  };
}

/**
 * The bytes of a revision a reviewer prompt quotes (src/broker/tools/review-prompt.ts, in its order):
 * title, objective, success criteria, notes, argv and env lines, input and output paths, then every
 * input's content. Derived diffs and earlier logs are left out: they are not the revision.
 */
export function reviewMaterialBytes(spec: TaskSpec): number {
  const utf8 = (s: string) => new TextEncoder().encode(s).length;
  const env = Object.entries(spec.runtime.env ?? {}).map(([k, v]) => `${k}=${v}`);
  const inputs = spec.inputs ?? [];
  const texts = [
    spec.title,
    spec.objective,
    spec.success_criteria,
    spec.notes ?? '',
    spec.runtime.argv.join('\n'),
    env.join('\n'),
    inputs.map((i) => i.path).join('\n'),
    spec.outputs.map((o) => o.path).join('\n'),
  ];
  return texts.reduce((n, t) => n + utf8(t), 0) + inputs.reduce((n, i) => n + i.size, 0);
}

/**
 * The `readable` fact from the revision and a text test per digest, which the broker answers by reading
 * each blob (isText in src/broker/tools/inputs.ts, the test get_review_prompt uses). Past the budget
 * nothing is read: the clause fails on the size alone.
 */
export function readableFacts(spec: TaskSpec, isTextDigest: (sha256: string) => boolean): ReadableFacts {
  const bytes = reviewMaterialBytes(spec);
  const budget = DEFAULT_PROMPT_BYTES;
  if (bytes > budget) return { bytes, budget, not_text: [] };
  const known = new Map<string, boolean>();
  const notText: string[] = [];
  for (const i of spec.inputs ?? []) {
    let text = known.get(i.sha256);
    if (text === undefined) {
      text = isTextDigest(i.sha256);
      known.set(i.sha256, text);
    }
    if (!text) notText.push(i.path);
  }
  return { bytes, budget, not_text: notText };
}
