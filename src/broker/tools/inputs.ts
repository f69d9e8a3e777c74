import { BrokerError } from '../../contracts/errors.js';
import type { InputFile } from '../../contracts/task-spec.js';
import { MAX_GET_INPUT_BYTES, MAX_UPLOAD_CALL_BYTES } from '../../contracts/tools-inputs.js';
import { GET_INPUT_UNTRUSTED } from '../../contracts/untrusted.js';
import { sha256Hex } from '../../platform/digest.js';
import type { Principal } from '../../store/principals-repo.js';
import type { BrokerDeps } from '../deps.js';
import {
  type ContentClassifier,
  type StreamedBlob,
  verifiedPages,
  verifiedPieces,
} from '../verified-blob.js';
import { loadVisibleProposal } from './proposals.js';

/**
 * Use cases of inputs (ADR 0012): uploading content by sha256 (MCP `upload_inputs`, REST
 * `PUT /api/v1/blobs/{sha256}`), reading an input of a revision (`get_input`), serving a blob to the
 * worker that runs an execution naming it (garbage collection is a step of the sweep,
 * src/broker/loops/sweep.ts; the reviewer's diff of two manifests is src/broker/tools/revision-diff.ts).
 *
 * Every read recomputes the sha256 of the stored bytes: a blob changed in the database behind the
 * master's back is refused (and logged), never served, so a worker can only ever receive approved bytes.
 *
 * Inputs belong to their owner (docs/security.md "Code the reviewer did not read"): a revision legitimately names only blobs its proposal's
 * owner uploaded (policy gives INPUT_UNKNOWN otherwise, so such a revision is never confirmable), and
 * every read — get_input, the reviewer's diff, a worker's fetch — serves a blob only in the name of a
 * principal who uploaded it. A blob someone else uploaded reads exactly like one that is not stored,
 * and no upload answer (`stored`, `stored_bytes`) depends on anyone else's uploads.
 */

/**
 * Stores `content` for `principal` after checking the quota and appends its audit row; answers whether
 * it was new *for this principal* (never whether someone else had uploaded the same bytes).
 */
function store(
  deps: BrokerDeps,
  principal: Principal,
  sha256: string,
  size: number,
  pieces: () => Iterable<Buffer>,
): boolean {
  const now = deps.clock.now();
  const blobs = deps.store.blobs;
  const fresh = !blobs.uploadedBy(principal.id, sha256);
  if (fresh) assertQuota(deps, principal, size);
  // New for this principal: written in full even when another principal stored the same bytes, so
  // the answer takes as long either way (docs/security.md "Fair share between principals").
  blobs.putChunks(sha256, size, pieces(), now, { writeAlways: fresh });
  blobs.recordUpload(principal.id, sha256, now);
  deps.store.audit.append({
    at: now,
    actor: principal.name,
    action: 'input.uploaded',
    subject_type: 'blob',
    subject_id: sha256,
    data: { principal_id: principal.id, size, new: fresh },
  });
  return fresh;
}

/** Throws QUOTA_EXCEEDED unless `bytes` more fit in the principal's `policy.input_quota_bytes`. */
function assertQuota(deps: BrokerDeps, principal: Principal, bytes: number): void {
  const limit = deps.config.policy.input_quota_bytes;
  const used = deps.store.blobs.bytesOf(principal.id);
  if (used + bytes > limit)
    throw new BrokerError(
      'QUOTA_EXCEEDED',
      `storing ${bytes} more bytes would put ${principal.name} at ${used + bytes} of ${limit} bytes of inputs`,
      'Inputs no live proposal or recent task names are collected after a while; cancel old drafts, or ask an operator to raise policy.input_quota_bytes.',
      { used_bytes: used, limit_bytes: limit },
    );
}

/** upload_inputs: decodes, hashes and stores each file; answers the manifest entries. Call inside a transaction. */
export function uploadInputs(
  deps: BrokerDeps,
  principal: Principal,
  files: ReadonlyArray<{ path: string; content: string; encoding: 'utf8' | 'base64' }>,
) {
  const decoded = files.map((f) => ({ path: f.path, bytes: decode(f.content, f.encoding, f.path) }));
  const total = decoded.reduce((n, f) => n + f.bytes.length, 0);
  if (total > MAX_UPLOAD_CALL_BYTES)
    throw new BrokerError(
      'PAYLOAD_TOO_LARGE',
      `these files are ${total} bytes together; one upload_inputs call carries at most ${MAX_UPLOAD_CALL_BYTES}`,
      'Split them over several calls, or PUT large files to /api/v1/blobs/{sha256} (gpu-broker propose --dir does it for you).',
    );
  if (new Set(files.map((f) => f.path)).size !== files.length)
    throw new BrokerError('INVALID_INPUT', 'a path appears twice in files', 'Send each path once.');
  let storedBytes = 0;
  const seen = new Set<string>(); // one store (and one audit row) per distinct blob per call
  const inputs: InputFile[] = decoded.map((f) => {
    const sha256 = sha256Hex(f.bytes);
    if (!seen.has(sha256) && store(deps, principal, sha256, f.bytes.length, () => [f.bytes]))
      storedBytes += f.bytes.length;
    seen.add(sha256);
    return { path: f.path, sha256, size: f.bytes.length };
  });
  return {
    inputs,
    stored_bytes: storedBytes,
    quota: {
      used_bytes: deps.store.blobs.bytesOf(principal.id),
      limit_bytes: deps.config.policy.input_quota_bytes,
    },
    next_action:
      'Put these entries in spec.inputs (add "executable": true where needed) and call create_proposal or revise_proposal.',
  };
}

function decode(content: string, encoding: 'utf8' | 'base64', path: string): Buffer {
  if (encoding === 'utf8') return Buffer.from(content, 'utf8');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(content) || content.length % 4 !== 0)
    throw new BrokerError(
      'INVALID_INPUT',
      `${path}: content is not valid base64`,
      'Send standard base64 (A-Z a-z 0-9 + /, padded with =), or encoding "utf8" for text.',
    );
  return Buffer.from(content, 'base64');
}

/**
 * PUT /api/v1/blobs/{sha256}, before a byte of the body is read (docs/performance.md "Noisy neighbours"): the declared size must fit
 * `policy.max_input_bytes` and, unless the principal already holds this digest, their quota beside
 * what their other uploads in flight declared (so parallel uploads cannot together pass it). The
 * route then streams the body to a temporary file, hashing it, and calls {@link putBlob}.
 */
export function admitBlobUpload(
  deps: BrokerDeps,
  principal: Principal,
  sha256: string,
  declared: number,
  /** Bytes the principal's other uploads in flight declared: they count as if stored. */
  inFlight: number,
): void {
  const max = deps.config.policy.max_input_bytes;
  if (declared > max)
    throw new BrokerError(
      'PAYLOAD_TOO_LARGE',
      `the body is declared as ${declared} bytes; one input is at most ${max} bytes (policy.max_input_bytes)`,
      'Inputs larger than policy.max_input_bytes cannot be uploaded; ask an operator, or fetch the data inside the task.',
      { limit_bytes: max },
    );
  // A blob this principal already has, PUT again at its size, stores nothing new. Any other size cannot
  // hash to that name, but its bytes are still received: it counts like a new upload.
  if (deps.store.blobs.sizeUploadedBy(principal.id, sha256) !== declared)
    assertQuota(deps, principal, inFlight + declared);
}

/** The refusal of bytes that do not hash to the name they were PUT under. */
export function digestMismatch(expected: string, actual: string): BrokerError {
  return new BrokerError(
    'DIGEST_MISMATCH',
    `the body's sha256 is ${actual}, not ${expected}`,
    'PUT the exact bytes to /api/v1/blobs/<their sha256> (sha256sum FILE).',
  );
}

/**
 * PUT /api/v1/blobs/{sha256}, once the body is in: `actual` is the sha256 the route computed while the
 * body streamed; `pieces` gives its `size` bytes in order (read only once the digest matched, a piece at
 * a time, so a large body is never in memory whole). Call inside a transaction.
 */
export function putBlob(
  deps: BrokerDeps,
  principal: Principal,
  sha256: string,
  actual: string,
  body: { size: number; pieces: () => Iterable<Buffer> },
) {
  if (actual !== sha256) throw digestMismatch(sha256, actual);
  // Every later read re-hashes the stored bytes (verifiedBlob), so a bad temporary file is never served.
  const fresh = store(deps, principal, sha256, body.size, body.pieces);
  return { sha256, size: body.size, stored: fresh };
}

/** get_input: one input of a revision, for reviewers and the proposal's owner. */
export async function getInput(
  deps: BrokerDeps,
  principal: Principal,
  q: {
    proposal_id: string;
    revision_id: string;
    path: string;
    offset?: number | undefined;
    max_bytes?: number | undefined;
  },
) {
  // Its owner and every reviewer or operator (loadVisibleProposal hides it from anyone else).
  const p = loadVisibleProposal(deps, principal, q.proposal_id);
  const r = deps.store.proposals.revision(q.revision_id);
  if (!r || r.proposal_id !== p.id)
    throw new BrokerError(
      'NOT_FOUND',
      `proposal ${q.proposal_id} has no revision ${q.revision_id}`,
      'get_proposal lists the revisions of a proposal.',
    );
  const input = (r.spec.inputs ?? []).find((i) => i.path === q.path);
  if (!input)
    throw new BrokerError(
      'NOT_FOUND',
      `revision ${q.revision_id} of ${q.proposal_id} has no input ${q.path}`,
      'get_revision lists the inputs of a revision.',
    );
  // Only what the owner uploaded: a draft naming someone else's digest reads as not stored. Verified
  // whole once, then page by page (verified-blob.ts verifiedPages): paging is O(size) in all.
  const blob = await verifiedPages(deps, p.owner_id, input.sha256, textClassifier);
  const { size, text } = blob;
  const maxBytes = q.max_bytes ?? MAX_GET_INPUT_BYTES;
  // pageBounds moves each end by at most 3 bytes (one UTF-8 character): a window that much wider does.
  const from = Math.min(q.offset ?? 0, size);
  const windowStart = Math.max(0, from - 3);
  const window = blob.read(windowStart, Math.min(size, from + maxBytes + 3));
  const bounds = pageBounds(window, text, from - windowStart, maxBytes);
  const [offset, end] = [windowStart + bounds.offset, windowStart + bounds.end];
  const slice = window.subarray(bounds.offset, bounds.end);
  return {
    path: input.path,
    sha256: input.sha256,
    size,
    offset,
    next_offset: end,
    complete: end === size,
    encoding: text ? ('utf8' as const) : ('base64' as const),
    content: text ? slice.toString('utf8') : slice.toString('base64'),
    untrusted_fields: [...GET_INPUT_UNTRUSTED],
  };
}

/**
 * The byte range of one get_input page. For text, both ends sit on UTF-8 character boundaries (issue
 * 20, item 10): an offset inside a character moves back to its first byte, and the end moves back to
 * the start of a character it would split — or, when `maxBytes` is smaller than that one character,
 * forward past it, so every page makes progress. `next_offset` (= end) stays an exact byte offset.
 */
export function pageBounds(
  content: Buffer,
  text: boolean,
  from: number,
  maxBytes: number,
): { offset: number; end: number } {
  const continuation = (i: number) => i < content.length && (content[i]! & 0xc0) === 0x80;
  let offset = Math.min(from, content.length);
  let end = Math.min(content.length, offset + maxBytes);
  if (!text) return { offset, end };
  while (offset > 0 && continuation(offset)) offset--;
  end = Math.min(content.length, offset + maxBytes);
  let back = end;
  while (back > offset && continuation(back)) back--;
  if (back > offset) end = back;
  else while (continuation(end)) end++;
  return { offset, end };
}

/** Text: valid UTF-8 with no NUL byte. */
export function isText(bytes: Buffer): boolean {
  const c = textClassifier();
  c.update(bytes);
  return c.result();
}

/** isText over bytes that arrive in pieces (a chunked blob streamed through verifiedPages). */
export function textClassifier(): ContentClassifier {
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let text = true;
  return {
    update: (piece) => {
      if (!text) return;
      if (piece.includes(0)) text = false;
      else
        try {
          decoder.decode(piece, { stream: true });
        } catch {
          text = false;
        }
    },
    result: () => {
      if (!text) return false;
      try {
        // A character cut off at the very end is not text.
        decoder.decode();
        return true;
      } catch {
        return false;
      }
    },
  };
}

/**
 * The blob a worker fetches for one of its executions: the execution must be this worker's, not
 * finished, and its task's spec must name the digest, which its owner uploaded. Anything else is
 * NOT_FOUND (no existence leak). Streamed in store chunks, hashed as they pass (verifiedPieces): the
 * worker verifies the whole again, and a blob that does not match is cut off before its end.
 */
export function blobForExecution(
  deps: BrokerDeps,
  workerId: string,
  executionId: string,
  sha256: string,
): StreamedBlob {
  const e = deps.store.leases.execution(executionId);
  const task = e ? deps.store.tasks.get(e.task_id) : undefined;
  const named = task?.spec.inputs?.some((i) => i.sha256 === sha256) ?? false;
  if (!e || !task || e.worker_id !== workerId || !named || !['assigned', 'accepted'].includes(e.phase))
    throw new BrokerError(
      'NOT_FOUND',
      `execution ${executionId} of ${workerId} names no input ${sha256} it may fetch now`,
      'A worker fetches the inputs of its own executions before they start.',
    );
  return verifiedPieces(deps, task.owner_id, sha256);
}
