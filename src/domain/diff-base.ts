import type { ReviewDecision } from './proposal.js';

/**
 * Which revision a reviewer's diff starts from (issue 20, item 5). Diffing revision N against N−1 hides
 * whatever N−1 added when nobody decided on N−1: a payload slipped into an unconfirmed revision and a
 * cosmetic fix in the next showed only the fix. So the base is the latest EARLIER revision that received
 * a review decision (APPROVE, REQUEST_CHANGES or REJECT) — what a reviewer actually judged — and, with
 * none, the empty set: every file added, the whole spec shown. The revisions between the base and the
 * one shown are listed, so the reviewer knows their changes are folded into the diff.
 *
 * Pure: every view (MCP get_revision, REST, dashboard, CLI) gets its base from this one function.
 */

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
  /** When it was made (ms); the latest decision on a revision names it. */
  at: number;
}

/** The revision the diff starts from, with the decision a reviewer made on it. */
export interface DiffBase {
  revision_id: string;
  number: number;
  digest: string;
  decision: ReviewDecision;
}

/** The base and the revisions between it and the one shown that nobody decided on. */
export interface DiffBaseChoice {
  /** Null: no earlier revision was decided on, so the diff is against nothing (all added). */
  base: DiffBase | null;
  /** Oldest first; their changes are part of the diff. */
  unreviewed_between: Array<{ revision_id: string; number: number; digest: string; confirmed: boolean }>;
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
    if (d) base = { revision_id: r.revision_id, number: r.number, digest: r.digest, decision: d.decision };
  }
  const from = base?.number ?? 0;
  return {
    base,
    unreviewed_between: earlier
      .filter((r) => r.number > from)
      .map((r) => ({
        revision_id: r.revision_id,
        number: r.number,
        digest: r.digest,
        confirmed: r.confirmed,
      })),
  };
}
