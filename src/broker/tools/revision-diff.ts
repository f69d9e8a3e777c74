import { BrokerError } from '../../contracts/errors.js';
import type { InputFile, TaskSpec } from '../../contracts/task-spec.js';
import { chooseDiffBase, type DiffBaseChoice } from '../../domain/diff-base.js';
import { diffSpecs, type SpecChange } from '../../domain/spec-diff.js';
import { type TextDiff, unifiedDiff } from '../../domain/text-diff.js';
import type { RevisionRecord } from '../../store/proposals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { verifiedBlob } from '../verified-blob.js';
import { isText } from './inputs.js';

/**
 * What a reviewer reads as "the changes" of a revision (issue 20, items 5 and 10): the spec diff and the
 * file diffs against the diff base that src/domain/diff-base.ts chooses (the latest earlier revision a
 * reviewer decided on, else nothing). Every view gets the changes from here: MCP and REST get_revision,
 * and through REST the dashboard and `gpu-broker review show`. Blob bytes are read through
 * `verifiedBlob` in the owner's name (re-hashed on every read), so a blob changed behind the master's back is never shown.
 */

/** One changed path between two manifests, as get_revision shows it. */
export interface InputChange {
  path: string;
  change: 'added' | 'removed' | 'modified';
  before?: { sha256: string; size: number } | undefined;
  after?: { sha256: string; size: number } | undefined;
  /** For a modified or added text file: the unified diff (added: every line `+`), one bounded page. */
  text_diff?: TextDiff | undefined;
  /** Why no (or only part of the) text diff is shown: binary, too large, unreadable, budget spent. */
  note?: string | undefined;
}

/** Largest file the reviewer's diff compares as text; larger ones are read with get_input. */
export const MAX_DIFF_FILE_BYTES = 512 * 1024;
/** Most diff lines one answer carries over all files but the one paged with `diff_path`. */
export const DIFF_LINE_BUDGET = 4000;

/** The base choice of revision `r` among its proposal's revisions and reviews. */
export function diffBaseOf(deps: BrokerDeps, r: RevisionRecord): DiffBaseChoice {
  const revisions = deps.store.proposals.revisions(r.proposal_id).map((x) => ({
    revision_id: x.id,
    number: x.number,
    digest: x.digest,
    confirmed: x.confirmed_at !== null,
  }));
  const decisions = deps.store.proposals
    .reviews(r.proposal_id)
    .map((v) => ({ revision_id: v.revision_id, decision: v.decision, at: v.created_at }));
  return chooseDiffBase(r.number, revisions, decisions);
}

/** The spec without its input manifest, which the file changes show file by file instead. */
function withoutInputs(spec: TaskSpec): Omit<TaskSpec, 'inputs'> {
  const { inputs: _inputs, ...rest } = spec;
  return rest;
}

/** The spec diff of `r` against `base` (null: against nothing, every leaf added). */
export function specChanges(base: RevisionRecord | null, r: RevisionRecord): SpecChange[] {
  return diffSpecs(base ? withoutInputs(base.spec) : {}, withoutInputs(r.spec));
}

/** A blob's text for the diff, or why there is none; bytes are re-hashed before they are shown. */
function readText(deps: BrokerDeps, ownerId: string, sha256: string): { text: string } | { note: string } {
  let bytes: Buffer;
  try {
    bytes = verifiedBlob(deps, ownerId, sha256);
  } catch (err) {
    if (err instanceof BrokerError && err.code === 'NOT_FOUND')
      return { note: 'content not stored any more' };
    if (err instanceof BrokerError && err.code === 'INTERNAL')
      return { note: 'the stored content does not match its sha256; not shown (an operator must remove it)' };
    throw err;
  }
  return isText(bytes) ? { text: bytes.toString('utf8') } : { note: 'binary' };
}

/**
 * The reviewer's diff of two manifests of `ownerId`'s proposal (bytes read only from blobs the owner
 * uploaded): added, removed and modified paths, with text diffs of added and
 * modified text files. One page per file: `maxLines` lines for the file named by `page.path` (from
 * `page.offset`), and the others share DIFF_LINE_BUDGET (or `maxLines`, if larger).
 */
export function diffInputs(
  deps: BrokerDeps,
  ownerId: string,
  before: readonly InputFile[],
  after: readonly InputFile[],
  maxLines: number,
  page: { path?: string | undefined; offset?: number | undefined } = {},
): InputChange[] {
  const a = new Map(before.map((i) => [i.path, i]));
  const b = new Map(after.map((i) => [i.path, i]));
  const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
  const meta = (i: InputFile | undefined) => (i ? { sha256: i.sha256, size: i.size } : undefined);
  let budget = Math.max(DIFF_LINE_BUDGET, maxLines);
  const changes: InputChange[] = [];
  for (const path of paths) {
    const x = a.get(path);
    const y = b.get(path);
    if (x && y && x.sha256 === y.sha256) continue;
    const change: InputChange = {
      path,
      change: !y ? 'removed' : x ? 'modified' : 'added',
      before: meta(x),
      after: meta(y),
    };
    changes.push(change);
    if (!y) continue;
    if ((x?.size ?? 0) > MAX_DIFF_FILE_BYTES || y.size > MAX_DIFF_FILE_BYTES) {
      change.note = 'too large to diff here; read it with get_input';
      continue;
    }
    const old = x ? readText(deps, ownerId, x.sha256) : { text: '' };
    const now = readText(deps, ownerId, y.sha256);
    if (!('text' in old) || !('text' in now)) {
      change.note = 'note' in now ? now.note : 'note' in old ? old.note : undefined;
      continue;
    }
    const paged = page.path === path;
    const lines = paged ? maxLines : Math.min(maxLines, budget);
    change.text_diff = unifiedDiff(old.text, now.text, lines, paged ? (page.offset ?? 0) : 0);
    if (!paged) budget -= lines;
    if (lines === 0 && change.text_diff.total_lines > 0)
      change.note = 'not shown: this answer carries enough diff lines; page it with diff_path';
  }
  return changes;
}
