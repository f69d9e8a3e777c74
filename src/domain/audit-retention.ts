/**
 * Audit retention (issue 14): which prefix of the live audit chain may move to an archive file.
 * Pure: the shell reads the chain's facts, asks here, and writes the segment.
 *
 * A row is archived only when all hold:
 * - it is older than `min_age_seconds` and not among the newest `keep_events` rows;
 * - it is before the row the incremental check continues from (the anchor stays live, so appends and
 *   the next check still link to a row in the table);
 * - the segment stays within `max_segment_events`, so one archive run is a bounded delete.
 */

/** Operator knobs for audit retention (master config `audit.retention`). */
export interface AuditRetentionPolicy {
  enabled: boolean;
  keep_events: number;
  min_age_seconds: number;
  max_segment_events: number;
}

/** What the shell knows about the live chain when it asks. */
export interface LiveChainFacts {
  /** seq of the last archived row (0 when nothing is archived yet). */
  archived_through: number;
  /** seq of the newest row (0 when the table is empty). */
  head_seq: number;
  /** seq of the last verified row: the incremental check's anchor. */
  verified_seq: number;
  /** seq of the newest row older than the age cut-off, or null when none is. */
  newest_old_enough: number | null;
}

/** The last seq of the next segment to archive, or null when nothing may move now. */
export function archiveBoundary(chain: LiveChainFacts, policy: AuditRetentionPolicy): number | null {
  if (!policy.enabled || chain.newest_old_enough === null) return null;
  const through = Math.min(
    chain.head_seq - Math.max(1, policy.keep_events),
    chain.newest_old_enough,
    chain.verified_seq - 1,
    chain.archived_through + policy.max_segment_events,
  );
  return through > chain.archived_through ? through : null;
}
