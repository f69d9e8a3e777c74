/**
 * Audit retention (docs/operations.md "Audit retention"): which prefix of the live audit chain may move to an archive file.
 * Pure: the shell reads the chain's facts, asks here, and writes the segment.
 *
 * A row is archived only when all hold:
 * - it is older than `min_age_seconds` and not among the newest `keep_events` rows;
 * - it is before the row the incremental check continues from (the anchor stays live, so appends and
 *   the next check still link to a row in the table);
 * - the segment stays within `max_segment_events`, so one archive is a bounded delete.
 *
 * One run archives up to `max_segments_per_run` segments back to back (one segment per
 * hour could never keep up with ~800 audited events/s); when it stops at that cap with rows still due,
 * the monitor runs again on its next check instead of waiting a whole interval, so the backlog drains
 * at up to `max_segments_per_run × max_segment_events` rows per check interval.
 */

/** Operator knobs for audit retention (master config `audit.retention`). */
export interface AuditRetentionPolicy {
  enabled: boolean;
  keep_events: number;
  min_age_seconds: number;
  max_segment_events: number;
  /** Segments one run archives at most (each one a file, a bounded delete and a yield). */
  max_segments_per_run: number;
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

/** The segments one run archives: each one's last seq, oldest first; `more`: rows still due after them. */
export interface ArchivePlan {
  through: number[];
  more: boolean;
}

/** The segments the next run archives, as if each one were archived before the next is chosen. */
export function archivePlan(chain: LiveChainFacts, policy: AuditRetentionPolicy): ArchivePlan {
  const through: number[] = [];
  let archived = chain.archived_through;
  for (;;) {
    const next = archiveBoundary({ ...chain, archived_through: archived }, policy);
    if (next === null) return { through, more: false };
    if (through.length >= Math.max(1, policy.max_segments_per_run)) return { through, more: true };
    through.push(next);
    archived = next;
  }
}
