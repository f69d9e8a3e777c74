import type { AgentCeiling } from '../contracts/agent-ceiling.js';
import type { Policy } from '../contracts/policy.js';
import { LIMIT_NAMES, type ResolvedLimits } from '../contracts/task-limits.js';
import type { TaskSpec } from '../contracts/task-spec.js';
import type { Finding } from './policy-types.js';
import { resolveLimits } from './task-limits.js';
import { quoteUntrusted } from './untrusted.js';

/**
 * What an agent reviewer may approve (issue 23 §2; docs/decisions/0027-agent-reviewer.md). Pure: the
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
  time_limit_seconds: number;
  limits: ResolvedLimits;
  /** The policy's per-card defaults times the cards: the cap of a limit the ceiling leaves out. */
  default_limits: ResolvedLimits;
  input_bytes: number;
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
  'time_limit',
  'limits',
  'inputs',
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
  time_limit: (f, c) =>
    f.time_limit_seconds <= c.max_time_limit_seconds
      ? null
      : `time_limit_seconds ${f.time_limit_seconds} > ${c.max_time_limit_seconds}`,
  limits: (f, c) => {
    for (const name of LIMIT_NAMES) {
      const cap = c.max_limits[name] ?? f.default_limits[name];
      if (f.limits[name] > cap) return `limits.${name} ${f.limits[name]} > ${cap}`;
    }
    return null;
  },
  inputs: (f, c) =>
    f.input_bytes <= c.max_input_bytes ? null : `input bytes ${f.input_bytes} > ${c.max_input_bytes}`,
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
    time_limit_seconds: spec.time_limit_seconds,
    limits,
    default_limits: defaults,
    input_bytes: (spec.inputs ?? []).reduce((n, i) => n + i.size, 0),
  };
}
