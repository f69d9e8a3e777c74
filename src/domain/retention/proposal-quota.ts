/**
 * Per-principal caps on what proposals store (ADR 0024): one token wrote 400 revisions of
 * 250 KiB in 5 s (~67 GiB/h) and nothing stopped it. Before a revision is stored the shell reads the
 * principal's usage and asks here; a refusal names the cap, the usage and what to do, and nothing is
 * written. Blobs have their own cap (`policy.input_quota_bytes`, src/broker/tools/inputs.ts).
 *
 * Pure: usage in, the first cap that the new revision would break (or null) out.
 */

/** The caps (master config `quotas`); null turns one off. */
export interface ProposalQuotas {
  /** Proposals of one owner that are not final (DRAFT, IN_REVIEW, CHANGES_REQUESTED). */
  max_open_proposals: number | null;
  /** Revisions one proposal may have (counting pruned ones: the revision number). */
  max_revisions_per_proposal: number | null;
  /** Revisions one principal may write in any hour. */
  max_revisions_per_hour: number | null;
  /** Bytes of revision specs one principal's stored revisions may hold. */
  max_revision_bytes: number | null;
}

/** What the principal holds and is about to add. */
export interface RevisionUsage {
  /** Whether the revision opens a new proposal (create_proposal) or adds to one (revise_proposal). */
  opens_proposal: boolean;
  open_proposals: number;
  /** The new revision's number in its proposal. */
  revision_number: number;
  revisions_last_hour: number;
  stored_bytes: number;
  /** The new revision's spec, in bytes. */
  new_bytes: number;
}

/** A cap the new revision would break. */
export interface QuotaBreach {
  cap: keyof ProposalQuotas;
  limit: number;
  /** What the principal holds now (or the number the new revision would get). */
  used: number;
  message: string;
  hint: string;
}

/** The first cap that storing the new revision would break, or null. Order: the cheapest fix first. */
export function revisionQuotaBreach(usage: RevisionUsage, q: ProposalQuotas): QuotaBreach | null {
  const checks: Array<[keyof ProposalQuotas, number, boolean, string, string]> = [
    [
      'max_open_proposals',
      usage.open_proposals,
      usage.opens_proposal && q.max_open_proposals !== null && usage.open_proposals >= q.max_open_proposals,
      `you have ${usage.open_proposals} open proposals; the cap is ${q.max_open_proposals}`,
      'Revise an open proposal instead, or cancel ones you no longer need (cancel_proposal).',
    ],
    [
      'max_revisions_per_proposal',
      usage.revision_number,
      q.max_revisions_per_proposal !== null && usage.revision_number > q.max_revisions_per_proposal,
      `this would be revision ${usage.revision_number}; a proposal may have ${q.max_revisions_per_proposal}`,
      'Confirm a revision for review, or cancel this proposal and start a new one with the spec you mean.',
    ],
    [
      'max_revisions_per_hour',
      usage.revisions_last_hour,
      q.max_revisions_per_hour !== null && usage.revisions_last_hour >= q.max_revisions_per_hour,
      `you wrote ${usage.revisions_last_hour} revisions in the last hour; the cap is ${q.max_revisions_per_hour}`,
      'Wait and retry (the count is over the last hour); batch your changes into fewer revisions.',
    ],
    [
      'max_revision_bytes',
      usage.stored_bytes,
      q.max_revision_bytes !== null && usage.stored_bytes + usage.new_bytes > q.max_revision_bytes,
      `storing ${usage.new_bytes} more bytes of revisions would put you at ${usage.stored_bytes + usage.new_bytes} of ${q.max_revision_bytes}`,
      'Cancel proposals you no longer need: abandoned proposals and old unreviewed revisions are pruned (docs/operations.md "Quotas and pruning"), or ask an operator to raise quotas.max_revision_bytes.',
    ],
  ];
  for (const [cap, used, broken, message, hint] of checks)
    if (broken) return { cap, limit: q[cap]!, used, message, hint };
  return null;
}
