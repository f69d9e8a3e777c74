import type { ReviewDecision } from '../machines/proposal.js';

/**
 * Which revision a reviewer's diff starts from (docs/security.md "Code the reviewer did not read"; docs/security.md "What a reviewer must read, and what the broker guarantees"). Diffing revision N
 * against N−1 hides whatever N−1 added when no person read N−1: a payload slipped into an unconfirmed
 * revision and a cosmetic fix in the next showed only the fix. The same holds for a revision only an
 * agent reviewer or a standing grant decided on: an agent's REQUEST_CHANGES for a title typo on a
 * revision carrying a payload would otherwise make the person's diff say "nothing changed". So the base
 * is the latest EARLIER revision a PERSON decided on (APPROVE, REQUEST_CHANGES or REJECT) — what a person
 * actually judged — and, with none, the empty set: every file added, the whole spec shown. Every revision
 * between the base and the one shown is listed with the decision it got, if any, and of what kind, so the
 * reader knows their changes are folded into the diff and that no person read them.
 *
 * Pure: every view (MCP get_revision, REST, dashboard, CLI) gets its base from this one function.
 */

/**
 * Who decided on a revision:
 * - `person`: a reviewer's or operator's review;
 * - `agent_reviewer`: a review by a principal holding the agent_reviewer role (ADR 0027);
 * - `grant`: a standing grant's auto-approval (the review row names the grant; nobody read the revision).
 */
export const DECISION_KINDS = ['person', 'agent_reviewer', 'grant'] as const;
/** Who decided on a revision. */
export type DecisionKind = (typeof DECISION_KINDS)[number];

/** A revision as the choice needs it. */
export interface RevisionFacts {
  revision_id: string;
  number: number;
  digest: string;
  confirmed: boolean;
}

/** A review decision as the choice needs it. */
export interface DecisionFacts {
  revision_id: string;
  decision: ReviewDecision;
  kind: DecisionKind;
  /** The deciding principal's name (for a grant: the person who decided the grant). */
  decided_by: string;
  /** When it was made (ms); the latest decision on a revision names it. */
  at: number;
}

/** The revision the diff starts from, with the decision a person made on it. */
export interface DiffBase {
  revision_id: string;
  number: number;
  digest: string;
  decision: ReviewDecision;
  /** Always `person`: named so every view can say so. */
  kind: 'person';
  decided_by: string;
}

/** A revision between the base and the one shown: no person read it. */
export interface RevisionNotReadByPerson {
  revision_id: string;
  number: number;
  digest: string;
  confirmed: boolean;
  /** The decision it got from an agent reviewer or a grant; null when nobody decided on it. */
  decision: ReviewDecision | null;
  kind: Exclude<DecisionKind, 'person'> | null;
  decided_by: string | null;
}

/** The base and the revisions between it and the one shown that no person read. */
export interface DiffBaseChoice {
  /** Null: no earlier revision was decided on by a person, so the diff is against nothing (all added). */
  base: DiffBase | null;
  /** Oldest first; their changes are part of the diff. */
  unreviewed_between: RevisionNotReadByPerson[];
}

/** Chooses the diff base of revision `shownNumber` among a proposal's `revisions` and `decisions`. */
export function chooseDiffBase(
  shownNumber: number,
  revisions: readonly RevisionFacts[],
  decisions: readonly DecisionFacts[],
): DiffBaseChoice {
  const latestDecision = new Map<string, DecisionFacts>();
  for (const d of decisions) {
    const seen = latestDecision.get(d.revision_id);
    if (!seen || d.at >= seen.at) latestDecision.set(d.revision_id, d);
  }
  const earlier = revisions.filter((r) => r.number < shownNumber).sort((a, b) => a.number - b.number);
  let base: DiffBase | null = null;
  for (const r of earlier) {
    const d = latestDecision.get(r.revision_id);
    if (d?.kind === 'person')
      base = {
        revision_id: r.revision_id,
        number: r.number,
        digest: r.digest,
        decision: d.decision,
        kind: 'person',
        decided_by: d.decided_by,
      };
  }
  const from = base?.number ?? 0;
  return {
    base,
    unreviewed_between: earlier
      .filter((r) => r.number > from)
      .map((r) => {
        const d = latestDecision.get(r.revision_id);
        // A decision after the base is never a person's: the base is the latest one that is.
        const other = d !== undefined && d.kind !== 'person' ? { ...d, kind: d.kind } : undefined;
        return {
          revision_id: r.revision_id,
          number: r.number,
          digest: r.digest,
          confirmed: r.confirmed,
          decision: other?.decision ?? null,
          kind: other?.kind ?? null,
          decided_by: other?.decided_by ?? null,
        };
      }),
  };
}
