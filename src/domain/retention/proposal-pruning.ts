/**
 * What the prune loop may delete (ADR 0024): revisions were never pruned, so a principal's
 * drafts grew without end. Two rules, each after a configurable age:
 *
 * - an **abandoned proposal** — CANCELLED or EXPIRED, no review decision on any of its revisions, no
 *   task — is deleted whole once untouched for `proposal_days` (a DRAFT nobody touches expires after
 *   `timing.proposal_ttl_seconds` and is then abandoned);
 * - an **old unreviewed revision** of any other proposal is deleted once older than `revision_days`,
 *   unless a reviewer decided on it, a task ran it, or it is its proposal's current (latest) revision.
 *   The reviewer's diff is unaffected: its base is the latest decided revision, which stays, and the
 *   revisions in between are folded into it (src/domain/review/diff-base.ts).
 *
 * The database backs the first two exceptions (reviews and tasks reference revisions). Audit rows stay;
 * the loop appends one per pruned proposal / per proposal whose revisions it pruned.
 *
 * Pure: facts in, a decision (with its reason, for tests and logs) out.
 */

/** Pruning settings (master config `pruning`); 0 days turns a rule off. */
export interface PruningPolicy {
  enabled: boolean;
  revision_days: number;
  proposal_days: number;
}

/** A revision as the decision needs it. */
export interface RevisionPruneFacts {
  created_at: number;
  /** Its proposal's current revision (the latest). */
  current: boolean;
  /** A reviewer decided on it (APPROVE, REQUEST_CHANGES or REJECT). */
  decided: boolean;
  /** A task was created from it. */
  ran: boolean;
}

/** A proposal as the decision needs it. */
export interface ProposalPruneFacts {
  state: string;
  updated_at: number;
  /** Any review decision on any of its revisions. */
  decided: boolean;
  has_task: boolean;
}

const DAY_MS = 86_400_000;

/** Which rules run at all. */
export function pruningEnabled(policy: PruningPolicy): { revisions: boolean; proposals: boolean } {
  return {
    revisions: policy.enabled && policy.revision_days > 0,
    proposals: policy.enabled && policy.proposal_days > 0,
  };
}

/** Why a revision stays, or `prune`. */
export type RevisionVerdict = 'prune' | 'disabled' | 'young' | 'current' | 'decided' | 'ran';

/** Whether an old unreviewed revision may be deleted at `now`. */
export function revisionVerdict(r: RevisionPruneFacts, policy: PruningPolicy, now: number): RevisionVerdict {
  if (!pruningEnabled(policy).revisions) return 'disabled';
  if (r.decided) return 'decided';
  if (r.ran) return 'ran';
  if (r.current) return 'current';
  if (r.created_at >= now - policy.revision_days * DAY_MS) return 'young';
  return 'prune';
}

/** The states in which a proposal without decisions is abandoned. */
export const ABANDONED_STATES: readonly string[] = ['CANCELLED', 'EXPIRED'];

/** Whether a whole proposal (with every revision) may be deleted at `now`. */
export function proposalVerdict(
  p: ProposalPruneFacts,
  policy: PruningPolicy,
  now: number,
): 'prune' | 'disabled' | 'not_abandoned' | 'decided' | 'young' {
  if (!pruningEnabled(policy).proposals) return 'disabled';
  if (!ABANDONED_STATES.includes(p.state)) return 'not_abandoned';
  if (p.decided || p.has_task) return 'decided';
  if (p.updated_at >= now - policy.proposal_days * DAY_MS) return 'young';
  return 'prune';
}

/** The earliest `created_at` / `updated_at` that is still young for each rule (what the SQL filters on). */
export function pruneCutoffs(policy: PruningPolicy, now: number): { revisions: number; proposals: number } {
  return {
    revisions: now - policy.revision_days * DAY_MS,
    proposals: now - policy.proposal_days * DAY_MS,
  };
}
