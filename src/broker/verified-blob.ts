import { createHash, type Hash } from 'node:crypto';
import { BrokerError } from '../contracts/errors.js';
import { sha256Hex } from '../platform/digest.js';
import type { BrokerDeps } from './deps.js';
import type { Verified } from './verified-cache.js';

/**
 * The one read of input bytes (ADR 0012; docs/security.md "Code the reviewer did not read"): every reader — get_input, the reviewer's diff, the
 * proposal's policy facts, a worker's fetch — gets a blob through here, in the name of a principal who
 * uploaded it, re-hashed on every read. Shared by tools/inputs.ts, tools/proposals.ts and
 * tools/revision-diff.ts, so it sits below all three.
 *
 * Paged reads (get_input) do not re-hash the whole blob per page: the first page verifies
 * the whole blob once and remembers, per digest and size, the sha256 of each CHUNK_BYTES chunk and,
 * within a bounded cache (128 MiB), the verified bytes themselves (verifiedPages; one memo and cache per
 * master: `deps.runtime.verified`, src/broker/verified-cache.ts). A later page comes
 * from the cached verified bytes; once the cache let them go, it reads only the chunks it overlaps and
 * re-hashes those against the remembered digests. So paging costs O(size) in all, and no page ever
 * serves a byte that does not match the digest: a blob changed behind the master's back after the first
 * page is either not read at all (the cached copy is served) or refused (INTERNAL). Sound across
 * principals: chunk digests and cached bytes come only from content that matched its sha256, and
 * every page still asks the store whether this principal uploaded it (and its size).
 *
 * A blob stored in chunks (over 1 MiB; src/store/blobs-repo.ts BLOB_CHUNK_BYTES) is verified a chunk at
 * a time, hashed and classified as it streams by, and kept whole in the cache only when it fits the
 * cache's budget; later pages read only the chunks they overlap. So a 1 GiB input costs one streamed
 * read to verify, then about a page per page, and never a 1 GiB buffer (docs/performance.md "Noisy neighbours").
 */

/**
 * The bytes of a blob `ownerId` uploaded, verified against its name. A blob the owner did not upload is
 * NOT_FOUND with the same words as one that is not stored; a stored blob that does not match its
 * digest is refused (INTERNAL) and logged.
 */
export function verifiedBlob(deps: BrokerDeps, ownerId: string, sha256: string): Buffer {
  const content = deps.store.blobs.contentUploadedBy(ownerId, sha256);
  if (content === undefined) throw notStored(sha256);
  const actual = sha256Hex(content);
  if (actual !== sha256) throw tampered(deps, sha256, actual);
  return content;
}

/** A blob as pieces to send on, verified as they pass (verifiedPieces). */
export interface StreamedBlob {
  readonly size: number;
  /** The stored pieces in order (at most a store chunk each); iterating past the last throws when they did not add up. */
  readonly pieces: Iterable<Buffer>;
}

/**
 * A blob `ownerId` uploaded, as pieces for a reader that checks the digest itself (a worker's fetch):
 * each piece is hashed as it passes, so the master holds one store chunk at a time (never the whole
 * blob) and can yield between pieces. Earlier pieces leave before the whole is verified, the last one
 * only after: when the pieces do not make the digest and size, the iteration throws (INTERNAL, logged)
 * instead of yielding it, so the reader never gets a complete body of a blob that does not match. A
 * blob stored inline (up to a store chunk) is one piece, so it is verified before anything leaves.
 * Errors before the first piece as verifiedBlob's.
 */
export function verifiedPieces(deps: BrokerDeps, ownerId: string, sha256: string): StreamedBlob {
  const size = deps.store.blobs.sizeUploadedBy(ownerId, sha256);
  const pieces = deps.store.blobs.piecesUploadedBy(ownerId, sha256);
  if (size === undefined || pieces === undefined) throw notStored(sha256);
  return {
    size,
    pieces: (function* () {
      const whole = createHash('sha256');
      let total = 0;
      // The piece that reaches the size is held back until the whole is verified.
      let last: Buffer | null = null;
      for (const piece of pieces) {
        whole.update(piece);
        total += piece.length;
        if (total >= size) {
          last = piece;
          break;
        }
        yield piece;
      }
      const actual = whole.digest('hex');
      if (actual !== sha256 || total !== size || last === null)
        throw goneOrTampered(deps, ownerId, sha256, actual);
      yield last;
    })(),
  };
}

/** Chunk size of the remembered digests: a page re-hashes at most its own bytes plus two chunks. */
export const CHUNK_BYTES = 256 * 1024;
/**
 * Says something of a blob from its bytes in order (get_input: whether it is text), without holding it
 * whole: `update` with each piece, then `result` once.
 */
export interface ContentClassifier {
  update(piece: Buffer): void;
  result(): boolean;
}

/** Sets `deps`' master's content cache budget (tests: 0 sends every page to the chunk-checked store read). */
export function setVerifiedContentCacheBytes(deps: Pick<BrokerDeps, 'runtime'>, bytes: number): void {
  deps.runtime.verified.budgetBytes = bytes;
  deps.runtime.verified.trim();
}

/** What `deps`' content cache holds and its first reads under way keep (tests: never past the budget). */
export function verifiedContentHeldBytes(deps: Pick<BrokerDeps, 'runtime'>): number {
  return deps.runtime.verified.heldBytes();
}

/** A blob to read page by page; see the module comment. */
export interface VerifiedPages {
  readonly size: number;
  /** What `classify` said of the whole blob (get_input: whether it is text). */
  readonly text: boolean;
  /** Bytes `[start, end)`, each chunk they overlap re-hashed against the blob's verified chunk digests. */
  read(start: number, end: number): Buffer;
}

/**
 * A blob `ownerId` uploaded, for paged reads: verified whole on first use, streamed (then remembered by
 * digest and size, with the classifier's answer), each later read checked chunk by chunk. Errors as
 * verifiedBlob's.
 */
export async function verifiedPages(
  deps: BrokerDeps,
  ownerId: string,
  sha256: string,
  classify: () => ContentClassifier,
): Promise<VerifiedPages> {
  const size = deps.store.blobs.sizeUploadedBy(ownerId, sha256);
  if (size === undefined) throw notStored(sha256);
  const cache = deps.runtime.verified;
  const key = `${sha256}:${size}`;
  let known = cache.memo.get(key);
  if (known === undefined) {
    // One verification per blob at a time: a second first page waits for the one under way.
    let pending = cache.verifying.get(key);
    if (pending === undefined) {
      pending = verifyStreaming(deps, ownerId, sha256, size, classify()).finally(() =>
        cache.verifying.delete(key),
      );
      cache.verifying.set(key, pending);
    }
    known = await pending;
  }
  cache.touch(key, known);
  const verified = known;
  return {
    size,
    text: verified.text,
    read: (start, end) => {
      if (end <= start) return Buffer.alloc(0);
      // The verified copy: exactly the bytes the digest names, whatever the store holds now.
      if (verified.content !== null) return verified.content.subarray(start, end);
      const first = Math.floor(start / CHUNK_BYTES);
      const last = Math.floor((end - 1) / CHUNK_BYTES);
      const from = first * CHUNK_BYTES;
      const to = Math.min(size, (last + 1) * CHUNK_BYTES);
      const bytes = deps.store.blobs.rangeUploadedBy(ownerId, sha256, from, to - from);
      if (bytes === undefined) throw notStored(sha256);
      for (let i = first; i <= last; i++) {
        const chunk = bytes.subarray((i - first) * CHUNK_BYTES, (i - first + 1) * CHUNK_BYTES);
        if (bytes.length === to - from && sha256Hex(chunk) === verified.chunks[i]) continue;
        cache.memo.delete(key);
        throw tampered(
          deps,
          sha256,
          `chunk ${i} of ${verified.chunks.length} differs from the verified blob`,
        );
      }
      return bytes.subarray(start - from, end - from);
    },
  };
}

/**
 * The first read of a blob for paging: its pieces (inline content, or chunk by chunk) hashed whole, cut
 * into CHUNK_BYTES digests and classified as they go by; the bytes are kept only when they fit the
 * content cache. A blob whose bytes do not add up to its digest and size is refused (INTERNAL). The
 * event loop turns after each store chunk (a few ms of hashing), so a reviewer's first page of a 1 GiB
 * input does not stop everyone else's requests for the seconds its hash takes (ADR 0031).
 */
async function verifyStreaming(
  deps: BrokerDeps,
  ownerId: string,
  sha256: string,
  size: number,
  classifier: ContentClassifier,
): Promise<Verified> {
  const pieces = deps.store.blobs.piecesUploadedBy(ownerId, sha256);
  if (pieces === undefined) throw notStored(sha256);
  const whole = createHash('sha256');
  const chunks: string[] = [];
  let chunk: Hash = createHash('sha256');
  let inChunk = 0;
  let total = 0;
  // Kept (for the cache) only when it fits beside what other first reads keep; older cached content makes
  // room at once (least recently read first). One buffer of its size: the budget holds at every moment,
  // with no second copy to join the pieces.
  const cache = deps.runtime.verified;
  const kept = size <= cache.budgetBytes - cache.keeping ? Buffer.allocUnsafe(size) : null;
  if (kept !== null) {
    cache.keeping += size;
    cache.trim();
  }
  try {
    let first = true;
    for (const piece of pieces) {
      if (!first) await new Promise<void>((resolve) => setImmediate(resolve));
      first = false;
      whole.update(piece);
      classifier.update(piece);
      // Past the stored size the blob changed under the read; the digest check below refuses it.
      if (kept !== null && total + piece.length <= size) piece.copy(kept, total);
      total += piece.length;
      for (let at = 0; at < piece.length; ) {
        const take = Math.min(CHUNK_BYTES - inChunk, piece.length - at);
        chunk.update(piece.subarray(at, at + take));
        inChunk += take;
        at += take;
        if (inChunk === CHUNK_BYTES) {
          chunks.push(chunk.digest('hex'));
          chunk = createHash('sha256');
          inChunk = 0;
        }
      }
    }
  } finally {
    if (kept !== null) cache.keeping -= size;
  }
  if (inChunk > 0) chunks.push(chunk.digest('hex'));
  const actual = whole.digest('hex');
  // A length that differs from the stored size means the blob changed between the two reads: refuse it.
  if (actual !== sha256 || total !== size) throw goneOrTampered(deps, ownerId, sha256, actual);
  return { text: classifier.result(), chunks, content: kept };
}

function notStored(sha256: string): BrokerError {
  return new BrokerError(
    'NOT_FOUND',
    `no stored input has sha256 ${sha256}`,
    'The proposal’s owner uploads it with upload_inputs or PUT /api/v1/blobs/{sha256}.',
  );
}

/**
 * A read that came out short or wrong: the blob was collected while it was being read (read chunk by
 * chunk over event-loop turns; the collector may remove one no live proposal holds) is NOT_FOUND, as if
 * asked a moment later; only bytes still stored under the digest that do not match it are tampering.
 */
function goneOrTampered(deps: BrokerDeps, ownerId: string, sha256: string, actual: string): BrokerError {
  if (deps.store.blobs.sizeUploadedBy(ownerId, sha256) === undefined) return notStored(sha256);
  return tampered(deps, sha256, actual);
}

function tampered(deps: BrokerDeps, sha256: string, actual: string): BrokerError {
  deps.logger.error({ sha256, actual }, 'input blob does not match its digest; refusing to serve it');
  return new BrokerError(
    'INTERNAL',
    `the stored content for ${sha256} does not match its digest`,
    'The master store was changed outside gpu-broker; upload the file again after an operator removes the damaged blob.',
  );
}
