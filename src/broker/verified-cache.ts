/**
 * What paged reads of input blobs remember (src/broker/verified-blob.ts `verifiedPages`): per
 * digest and size, the sha256 of each chunk and, within a bounded budget, the verified bytes; and the
 * first reads under way. One per master, in its runtime (src/broker/runtime.ts `verified`), so two
 * masters in one process never serve each other's cached bytes or share one budget.
 */

/** Blobs remembered at most (least recently read first out): 256 digests of 64 MiB blobs take ~4 MiB. */
export const VERIFIED_MEMO_MAX = 256;
/** The content cache's default budget: most verified bytes kept in memory for paging. */
export const VERIFIED_CONTENT_CACHE_BYTES = 128 * 1024 * 1024;

/** What the first read of a blob established. */
export interface Verified {
  /** Valid UTF-8 without NUL (`isText` of the caller, computed once on the whole blob). */
  readonly text: boolean;
  /** sha256 of each chunk (verified-blob.ts CHUNK_BYTES), in order. */
  readonly chunks: readonly string[];
  /** The verified bytes themselves while the content cache holds them (`budgetBytes` in all). */
  content: Buffer | null;
}

/** The remembered verifications of one master, and its content cache's budget. */
export class VerifiedCache {
  /** By `${sha256}:${size}`, least recently read first (Map order is insertion order). */
  readonly memo = new Map<string, Verified>();
  /** First reads under way, by the same key as memo. */
  readonly verifying = new Map<string, Promise<Verified>>();
  /** Most verified bytes kept in memory for paging (least recently read let go first). */
  budgetBytes = VERIFIED_CONTENT_CACHE_BYTES;
  /**
   * Bytes first reads under way are keeping for the cache: they count against its budget from their
   * start, so many first reads of different blobs at once cannot together hold more than the budget.
   */
  keeping = 0;

  /** What the content cache holds and first reads under way are keeping. */
  heldBytes(): number {
    let held = this.keeping;
    for (const v of this.memo.values()) held += v.content?.length ?? 0;
    return held;
  }

  /** Lets go of cached content, least recently read first, until the budget holds. */
  trim(): void {
    let held = this.heldBytes();
    for (const v of this.memo.values()) {
      if (held <= this.budgetBytes) return;
      if (v.content === null) continue;
      held -= v.content.length;
      v.content = null;
    }
  }

  /** Remembers `known` as the most recently read, dropping the least recently read past the bound. */
  touch(key: string, known: Verified): void {
    this.memo.delete(key);
    this.memo.set(key, known);
    if (this.memo.size > VERIFIED_MEMO_MAX) this.memo.delete(this.memo.keys().next().value!);
    this.trim();
  }
}
