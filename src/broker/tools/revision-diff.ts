import { BrokerError } from '../../contracts/errors.js';
import type { InputFile, TaskSpec } from '../../contracts/task-spec.js';
import { chooseDiffBase, type DecisionKind, type DiffBaseChoice } from '../../domain/review/diff-base.js';
import {
  admitRead,
  type BudgetLeft,
  compareLimit,
  DEFAULT_DIFF_BUDGET,
  type DiffBudget,
  fullBudget,
  type NotDiffed,
  notDiffedNote,
  workSpent,
} from '../../domain/review/diff-budget.js';
import { diffSpecs, type SpecChange } from '../../domain/review/spec-diff.js';
import { type DiffScript, diffScript, pageScript, type TextDiff } from '../../domain/review/text-diff.js';
import type { ReviewRecord, RevisionRecord } from '../../store/proposals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { DiffMemo } from '../diff-memo.js';
import type { PrincipalShare } from '../principal-share.js';
import { verifiedBlob } from '../verified-blob.js';
import { decisionKindOf } from './agent-review.js';
import { isText } from './inputs.js';
import { principalName } from './views.js';

/**
 * What a reviewer reads as "the changes" of a revision (docs/security.md "Code the reviewer did not read"): the spec diff and the
 * file diffs against the diff base that src/domain/review/diff-base.ts chooses (the latest earlier revision a
 * PERSON decided on, else nothing). Every view gets the changes from here: MCP and REST get_revision,
 * and through REST the dashboard and `gpu-broker review show`. Blob bytes are read through
 * `verifiedBlob` in the owner's name (re-hashed on every read), so a blob changed behind the master's back is never shown.
 */

/** One side of a changed path: its bytes by digest, and whether it is placed executable (0555). */
export interface InputSide {
  sha256: string;
  size: number;
  executable: boolean;
}

/** One changed path between two manifests, as get_revision shows it. */
export interface InputChange {
  path: string;
  change: 'added' | 'removed' | 'modified';
  before?: InputSide | undefined;
  after?: InputSide | undefined;
  /** For a modified or added text file: the unified diff (added: every line `+`), one bounded page. */
  text_diff?: TextDiff | undefined;
  /** Why no text diff was computed: the file or the answer is over its diff budget (docs/performance.md "Noisy neighbours"). */
  not_diffed?: NotDiffed | undefined;
  /** Why no (or only part of the) text diff is shown: binary, too large, unreadable, budget spent. */
  note?: string | undefined;
}

/** Most diff lines one answer carries over all files but the one paged with `diff_path`. */
export const DIFF_LINE_BUDGET = 4000;

/** Files whose digests one ownership query asks about (diffInputs). */
const OWNERSHIP_BATCH = 64;

/** Resolves on the next turn of the event loop, after pending I/O. */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * The master's get_revision share (its runtime's `diffShare`, src/broker/runtime.ts): at most
 * `quotas.diff_calls_per_reader` of one reader's diffs run at once, at most
 * `quotas.diff_queued_per_reader` more wait in its own queue, past that get_revision answers
 * UNAVAILABLE; so one reader's flood interleaves only a few diff loops with everyone else's requests.
 */
export function diffShareOf(deps: Pick<BrokerDeps, 'runtime'>): PrincipalShare {
  return deps.runtime.diffShare;
}

/**
 * Who made a stored review, and of what kind: a grant's auto-approval names its grant (`reviewer_id` is
 * then the person who decided the grant, but nobody read the revision); otherwise the reviewer's roles
 * say (roles never change once a principal exists, so this is the kind it had when it decided).
 */
export function decisionKindOfReview(
  deps: Pick<BrokerDeps, 'store'>,
  review: ReviewRecord,
): { kind: DecisionKind; decided_by: string } {
  const grantId = (review as ReviewRecord & { grant_id?: string | null }).grant_id ?? null;
  // Named as the audit row names it (`approved_by: grant <id>`): the grant approved, not its decider.
  if (grantId !== null) return { kind: 'grant', decided_by: `grant ${grantId}` };
  const reviewer = deps.store.principals.findById(review.reviewer_id);
  // An unknown reviewer is never taken for a person.
  return {
    kind: reviewer ? decisionKindOf(reviewer) : 'agent_reviewer',
    decided_by: principalName(deps.store, review.reviewer_id),
  };
}

/** The base choice of revision `r` among its proposal's revisions and reviews. */
export function diffBaseOf(deps: BrokerDeps, r: RevisionRecord): DiffBaseChoice {
  const revisions = deps.store.proposals.revisions(r.proposal_id).map((x) => ({
    revision_id: x.id,
    number: x.number,
    digest: x.digest,
    confirmed: x.confirmed_at !== null,
  }));
  const decisions = deps.store.proposals.reviews(r.proposal_id).map((v) => ({
    revision_id: v.revision_id,
    decision: v.decision,
    at: v.created_at,
    ...decisionKindOfReview(deps, v),
  }));
  return chooseDiffBase(r.number, revisions, decisions);
}

/** How an input is placed: 0555 when executable, else 0444. */
function modeOf(i: InputFile): string {
  return i.executable === true ? 'executable, 0555' : 'not executable, 0444';
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
function readText(
  deps: BrokerDeps,
  ownerId: string,
  sha256: string,
): { text: string } | { note: string; lasting: boolean } {
  let bytes: Buffer;
  try {
    bytes = verifiedBlob(deps, ownerId, sha256);
  } catch (err) {
    if (err instanceof BrokerError && err.code === 'NOT_FOUND')
      return { note: 'content not stored any more', lasting: false };
    if (err instanceof BrokerError && err.code === 'INTERNAL')
      return {
        note: 'the stored content does not match its sha256; not shown (an operator must remove it)',
        lasting: false,
      };
    throw err;
  }
  return isText(bytes) ? { text: bytes.toString('utf8') } : { note: 'binary', lasting: true };
}

/** What one file's diff came to: a script, a note, or "not diffed" with what it would have cost. */
type FileOutcome = { script: DiffScript } | { note: string } | { not_diffed: NotDiffed };

/**
 * The diff of one file of `ownerId`'s, from the memo when both digests are the owner's (`owned`: the
 * sizes of the call's digests the owner uploaded, asked once per call), else read and compared within
 * `left` (which it charges). Only lasting outcomes (a script, "binary") are memoised: "not stored" or
 * "does not match" may change.
 */
function fileOutcome(
  deps: BrokerDeps,
  ownerId: string,
  owned: Readonly<Record<string, number>>,
  x: InputFile | undefined,
  y: InputFile,
  left: BudgetLeft,
  budget: DiffBudget,
): FileOutcome {
  const key = DiffMemo.key(x?.sha256 ?? null, y.sha256);
  const memo = deps.runtime.diffs;
  // Ownership first: a digest pair someone else's diff put in the memo is no way to read their bytes.
  if ((!x || owned[x.sha256] !== undefined) && owned[y.sha256] !== undefined) {
    const hit = memo.get(key);
    if (hit) return hit;
  }
  // Stored sizes, not the manifest's (which the submitter wrote): the bytes that would be read.
  const sizeBefore = x ? (owned[x.sha256] ?? 0) : 0;
  const sizeAfter = owned[y.sha256] ?? 0;
  const refused = admitRead(sizeBefore, sizeAfter, left, budget);
  if (refused) return { not_diffed: refused };
  left.bytes -= sizeBefore + sizeAfter;
  const old = x ? readText(deps, ownerId, x.sha256) : { text: '' };
  const now = readText(deps, ownerId, y.sha256);
  if (!('text' in old) || !('text' in now)) {
    const why = 'note' in now ? now : (old as { note: string; lasting: boolean });
    if (why.lasting) memo.set(key, { note: why.note });
    return { note: why.note };
  }
  const script = diffScript(old.text, now.text, compareLimit(left, budget));
  if ('refused' in script) {
    const why = workSpent(script.refused.work, left);
    left.work = 0;
    return { not_diffed: why };
  }
  left.work -= script.work;
  memo.set(key, { script });
  return { script };
}

/**
 * The reviewer's diff of two manifests of `ownerId`'s proposal (bytes read only from blobs the owner
 * uploaded): added, removed and modified paths, with text diffs of added and modified text files.
 * One page per file: `maxLines` lines for the file named by `page.path` (from `page.offset`), and the
 * others share DIFF_LINE_BUDGET (or `maxLines`, if larger).
 *
 * Bounded (ADR 0031): the call reads and compares within `budget` (src/domain/review/diff-budget.ts),
 * the paged file first so it is always diffed when it fits the per-file limits; a file past the budget
 * gets a `not_diffed` entry and a note. Between files it yields to the event loop, so a request or a
 * worker's ping waits for one file's work at most, never the whole call.
 */
export async function diffInputs(
  deps: BrokerDeps,
  ownerId: string,
  before: readonly InputFile[],
  after: readonly InputFile[],
  maxLines: number,
  page: { path?: string | undefined; offset?: number | undefined } = {},
  budget: DiffBudget = DEFAULT_DIFF_BUDGET,
): Promise<InputChange[]> {
  const a = new Map(before.map((i) => [i.path, i]));
  const b = new Map(after.map((i) => [i.path, i]));
  const paths = [...new Set([...a.keys(), ...b.keys()])].sort();
  const meta = (i: InputFile | undefined): InputSide | undefined =>
    i ? { sha256: i.sha256, size: i.size, executable: i.executable === true } : undefined;
  const changes: InputChange[] = [];
  const outcomes = new Map<string, FileOutcome>();
  const work: Array<{ change: InputChange; x: InputFile | undefined; y: InputFile }> = [];
  for (const path of paths) {
    const x = a.get(path);
    const y = b.get(path);
    const flagged = x !== undefined && y !== undefined && (x.executable === true) !== (y.executable === true);
    if (x && y && x.sha256 === y.sha256 && !flagged) continue;
    const change: InputChange = {
      path,
      change: !y ? 'removed' : x ? 'modified' : 'added',
      before: meta(x),
      after: meta(y),
    };
    changes.push(change);
    // The same bytes placed with another mode: nothing to diff, but a file that now runs is a change.
    if (x && y && x.sha256 === y.sha256)
      change.note = `only its executable flag changed (${modeOf(x)} → ${modeOf(y)}); the bytes are the same`;
    else if (y) work.push({ change, x, y });
  }
  // The paged file first: it gets the budget before the rest of the answer.
  work.sort((p, q) => Number(q.change.path === page.path) - Number(p.change.path === page.path));
  const left = fullBudget(budget);
  // One ownership query per OWNERSHIP_BATCH files (ADR 0031), asked as the loop reaches them: 2,000
  // digests in one statement held the event loop ~8 ms under a diff flood. The bytes themselves are
  // still read (and re-checked) in the owner's name, file by file.
  const owned: Record<string, number> = Object.create(null);
  for (const [k, { change, x, y }] of work.entries()) {
    if (k > 0) await nextTurn();
    if (k % OWNERSHIP_BATCH === 0) {
      const batch = work.slice(k, k + OWNERSHIP_BATCH);
      const sizes = deps.store.blobs.sizesUploadedBy(
        ownerId,
        batch.flatMap((w) => (w.x ? [w.x.sha256, w.y.sha256] : [w.y.sha256])),
      );
      for (const sha of Object.keys(sizes)) owned[sha] = sizes[sha] as number;
    }
    outcomes.set(change.path, fileOutcome(deps, ownerId, owned, x, y, left, budget));
  }
  let lineBudget = Math.max(DIFF_LINE_BUDGET, maxLines);
  for (const change of changes) {
    const outcome = outcomes.get(change.path);
    if (!outcome) continue;
    if ('not_diffed' in outcome) {
      change.not_diffed = outcome.not_diffed;
      change.note = notDiffedNote(outcome.not_diffed);
      continue;
    }
    if ('note' in outcome) {
      change.note = outcome.note;
      continue;
    }
    const paged = page.path === change.path;
    const lines = paged ? maxLines : Math.min(maxLines, lineBudget);
    change.text_diff = pageScript(outcome.script, lines, paged ? (page.offset ?? 0) : 0);
    if (!paged) lineBudget -= lines;
    if (lines === 0 && change.text_diff.total_lines > 0)
      change.note = 'not shown: this answer carries enough diff lines; page it with diff_path';
  }
  return changes;
}
