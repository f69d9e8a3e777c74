import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { GC_BATCH_BYTES, GC_BATCH_ROWS } from '../../store/blobs-repo.js';
import type { BrokerDeps } from '../deps.js';

/**
 * Blob garbage collection in batches (docs/performance.md "Noisy neighbours"): the sweep's step 1 (sweep.ts) used to drop every
 * expired upload row and delete every unheld blob in one transaction, holding the event loop for as
 * long as 100k blobs take. Here each batch (GC_BATCH_ROWS rows, about GC_BATCH_BYTES of content) is its
 * own transaction, and the event loop runs between batches, so requests and worker pings are served
 * while a large collection goes on. What is collected is exactly what BlobsRepo.collectGarbage would
 * collect: the rules are the repository's, only the slicing is here. A row refreshed between two
 * batches (a new upload of the same bytes) is re-checked by the next batch's own statement.
 */

/** How many blobs one collection deleted, and in how many batches. */
export interface BlobGcResult {
  readonly blobs: number;
  readonly batches: number;
}

/** Runs one collection at the clock's now, batch by batch; see the module comment. */
export async function collectBlobGarbageInBatches(
  deps: BrokerDeps,
  graceMs = deps.config.storage.blob_grace_seconds * 1000,
  batch = { rows: GC_BATCH_ROWS, bytes: GC_BATCH_BYTES },
): Promise<BlobGcResult> {
  const before = deps.clock.now() - graceMs;
  const { store } = deps;
  let batches = 0;
  for (;;) {
    const dropped = store.transaction(() => store.blobs.expireUploads(before, before, batch.rows));
    batches++;
    await yieldToEventLoop();
    if (dropped < batch.rows) break;
  }
  let blobs = 0;
  for (;;) {
    const r = store.transaction(() => store.blobs.deleteUnheld(before, batch.rows, batch.bytes));
    batches++;
    blobs += r.blobs;
    await yieldToEventLoop();
    if (!r.more || r.blobs === 0) break;
  }
  return { blobs, batches };
}
