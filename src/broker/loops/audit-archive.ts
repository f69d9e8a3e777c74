import { appendFileSync, closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { canonicalJson } from '../../contracts/canonical-json.js';
import {
  type ArchiveSegment,
  type AuditEvent,
  type ChainPoint,
  checkAuditRow,
  DEFAULT_AUDIT_BATCH,
  GENESIS_HASH,
} from '../../store/audit-repo.js';
import type { Store } from '../../store/store.js';

/**
 * Audit archive files (docs/operations.md "Audit retention"). A segment is a JSON-lines file, one audit row per line with every
 * stored field (`seq, at, actor, action, subject_type, subject_id, data, prev_hash, hash`), oldest
 * first. The first line's `prev_hash` is the hash the segment continues from (genesis, or the previous
 * segment's last hash) and the last line's `hash` is the `prev_hash` of the first row after it, so
 * segments and the live table verify as one chain, and one file verifies offline on its own.
 */

/** Folder under the data dir that holds the segments. */
export const AUDIT_ARCHIVE_DIR = 'audit-archive';

/** Result of verifying archive files, optionally followed by the live table. */
export type ChainFileVerification =
  | { ok: true; events: number; first_seq: number; first_prev_hash: string; head_seq: number; head: string }
  | { ok: false; events: number; file: string; first_bad_seq: number | null; problem: string };

/** A row that did not verify while being archived: nothing was deleted. */
export class AuditArchiveError extends Error {
  constructor(
    readonly seq: number,
    readonly problem: string,
  ) {
    super(`audit seq ${seq}: ${problem}; nothing archived`);
  }
}

/** The file name of the segment first..last (zero-padded, so names sort in chain order). */
export function segmentFileName(firstSeq: number, lastSeq: number): string {
  return `audit-${String(firstSeq).padStart(12, '0')}-${String(lastSeq).padStart(12, '0')}.jsonl`;
}

/**
 * Writes rows after the live start through `throughSeq` to a new segment file (batch by batch, yielding
 * between batches, each row re-checked against the one before), then records the segment and deletes
 * its rows, `batch` per transaction with a yield between (deleteArchivedRows). A row that does not
 * verify aborts the archive: nothing is recorded or deleted.
 */
export async function archiveSegment(
  store: Store,
  dataDir: string,
  throughSeq: number,
  now: number,
  yieldToLoop: () => Promise<void>,
  batch = DEFAULT_AUDIT_BATCH,
): Promise<ArchiveSegment> {
  const start = store.audit.liveStart();
  const dir = join(dataDir, AUDIT_ARCHIVE_DIR);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = segmentFileName(start.seq + 1, throughSeq);
  const tmp = join(dir, `${file}.tmp`);
  const fd = openSync(tmp, 'w', 0o600);
  let prev: ChainPoint = start;
  try {
    while (prev.seq < throughSeq) {
      const rows = store.audit.rowsAfter(prev.seq, Math.min(batch, throughSeq - prev.seq));
      if (rows.length === 0) throw new AuditArchiveError(prev.seq + 1, 'row is missing');
      let text = '';
      for (const row of rows) {
        const problem = checkAuditRow(prev, row);
        if (problem) throw new AuditArchiveError(row.seq, problem);
        text += `${canonicalJson(row)}\n`;
        prev = { seq: row.seq, hash: row.hash };
      }
      appendFileSync(fd, text);
      await yieldToLoop();
    }
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, join(dir, file));
  const segment: ArchiveSegment = {
    first_seq: start.seq + 1,
    last_seq: throughSeq,
    first_prev_hash: start.hash,
    last_hash: prev.hash,
    file,
    archived_at: now,
  };
  store.audit.recordArchive(segment);
  await deleteArchivedRows(store, yieldToLoop, batch);
  return segment;
}

/**
 * Deletes the rows recorded segments cover, `batch` per transaction, yielding between: after each
 * archive, and at the start of a retention run for rows a crash left behind.
 */
export async function deleteArchivedRows(
  store: Store,
  yieldToLoop: () => Promise<void>,
  batch = DEFAULT_AUDIT_BATCH,
): Promise<number> {
  let deleted = 0;
  for (;;) {
    const n = store.audit.deleteArchived(batch);
    deleted += n;
    if (n < batch) return deleted;
    await yieldToLoop();
  }
}

/**
 * Verifies archive files as one chain, in the order given. `from` is where the first file must
 * continue from; without it the first file's own first `prev_hash` is taken as the start (genesis is
 * required only when it starts at seq 1), which is how an operator checks a lone file offline.
 */
export function verifyArchiveFiles(paths: string[], from?: ChainPoint): ChainFileVerification {
  let prev: ChainPoint | undefined = from;
  let first: ChainPoint | undefined = from;
  let events = 0;
  for (const path of paths) {
    let lines: string[];
    try {
      lines = readFileSync(path, 'utf8').split('\n');
    } catch (err) {
      return { ok: false, events, file: path, first_bad_seq: null, problem: (err as Error).message };
    }
    for (const line of lines) {
      if (line === '') continue;
      let row: AuditEvent;
      try {
        row = JSON.parse(line) as AuditEvent;
      } catch {
        return { ok: false, events, file: path, first_bad_seq: null, problem: 'a line is not JSON' };
      }
      events++;
      if (prev === undefined) {
        prev = { seq: row.seq - 1, hash: row.seq === 1 ? GENESIS_HASH : row.prev_hash };
        first = prev;
      }
      const problem = checkAuditRow(prev, row);
      if (problem) return { ok: false, events, file: path, first_bad_seq: row.seq ?? null, problem };
      prev = { seq: row.seq, hash: row.hash };
    }
  }
  const start = first ?? { seq: 0, hash: GENESIS_HASH };
  const head = prev ?? start;
  return {
    ok: true,
    events,
    first_seq: start.seq + 1,
    first_prev_hash: start.hash,
    head_seq: head.seq,
    head: head.hash,
  };
}

/**
 * Verifies the whole chain an operator holds: every recorded archive segment's file (from genesis,
 * each continuing from the one before and ending on its recorded hash), then the live table from
 * there. Synchronous: for `gpu-broker audit verify`, which runs beside the master, not in it.
 */
export function verifyWholeChain(store: Store, dataDir: string): ChainFileVerification {
  const dir = join(dataDir, AUDIT_ARCHIVE_DIR);
  let point: ChainPoint = { seq: 0, hash: GENESIS_HASH };
  let events = 0;
  for (const seg of store.audit.segments()) {
    const path = join(dir, seg.file);
    const v = verifyArchiveFiles([path], point);
    if (!v.ok) return { ...v, events: events + v.events };
    if (v.head_seq !== seg.last_seq || v.head !== seg.last_hash)
      return {
        ok: false,
        events: events + v.events,
        file: path,
        first_bad_seq: v.head_seq,
        problem: `segment ends at seq ${v.head_seq}, recorded as ${seg.last_seq} with another hash`,
      };
    events += v.events;
    point = { seq: v.head_seq, hash: v.head };
  }
  const start = store.audit.liveStart();
  if (start.seq !== point.seq || start.hash !== point.hash)
    return {
      ok: false,
      events,
      file: 'audit_events',
      first_bad_seq: start.seq + 1,
      problem: 'the live table does not continue from the last archive segment',
    };
  const live = store.audit.verify();
  if (!live.ok)
    return {
      ok: false,
      events: events + live.events,
      file: 'audit_events',
      first_bad_seq: live.first_bad_seq,
      problem: live.problem,
    };
  const head = store.audit.head() ?? point;
  return {
    ok: true,
    events: events + live.events,
    first_seq: 1,
    first_prev_hash: GENESIS_HASH,
    head_seq: head.seq,
    head: head.hash,
  };
}
