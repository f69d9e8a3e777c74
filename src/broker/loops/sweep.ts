import type { BrokerDeps } from '../deps.js';
import { moveProposal } from '../machines/proposal.js';
import { collectBlobGarbageInBatches } from './blob-gc.js';
import { sweepGrants } from './grant-sweep.js';
import { sweepExecutions } from './liveness.js';

/**
 * The master's sweep, one `tick` every `timing.sweep_interval_ms` (src/main.ts schedules it; deadlines
 * are stored, so a restart loses none). Each tick, in order:
 *  1. every `RETENTION_SWEEP_MS`: prune acknowledged outbox rows and old idempotency keys (one
 *     transaction), then start collecting the blobs nothing names any more, batch by batch with the
 *     event loop free in between (blob-gc.ts; one collection at a time);
 *  2. every `REVALIDATE_MS`: re-check the live worker sessions (a revoked token or a disabled worker is
 *     disconnected);
 *  3. expire proposals past their TTL (docs/state-machines.md: a sweeper, not lazily), and standing
 *     grants past theirs (grant-sweep.ts);
 *  4. the execution deadlines: offline workers past grace, overdue cleanup receipts (liveness.ts);
 *  5. ask the scheduler for a pass (deadlines may have freed cards).
 * A step that throws stops the tick; the caller logs it and the next tick starts again at step 1.
 */

/** How often acknowledged outbox rows and old idempotency keys are pruned. */
export const RETENTION_SWEEP_MS = 10 * 60_000;
/** Acknowledged worker messages are kept a day for diagnosis. */
export const ACKED_OUTBOX_RETENTION_MS = 24 * 3600_000;
/** Idempotency keys are honoured for a week; a retry after that is a new request (docs/mcp-tools.md). */
export const IDEMPOTENCY_RETENTION_MS = 7 * 24 * 3600_000;
/** How often live worker sessions are re-checked against their principal and worker rows. */
export const REVALIDATE_MS = 5000;
/**
 * The default of `storage.blob_grace_seconds`: how long an uploaded blob is kept before any spec names
 * it, and a finished task's blobs after it ends.
 */
export const BLOB_GRACE_MS = 24 * 3600 * 1000;

/** When the throttled steps last ran (epoch ms; 0: never). */
export interface SweepMarks {
  lastRetention: number;
  lastRevalidate: number;
}

/**
 * The blob collection `deps`' master has under way, or null (its runtime's `blobCollection`,
 * src/broker/runtime.ts: it spans many event-loop turns; one at a time).
 */
export function blobGcUnderWay(deps: Pick<BrokerDeps, 'runtime'>): Promise<void> | null {
  return deps.runtime.blobCollection;
}

/** What a tick needs: the broker, the hub's session re-check (an edge), and the marks it keeps. */
export interface SweepDeps {
  broker: BrokerDeps;
  /** Re-checks every live worker session (`WorkerHub.revalidate`). */
  revalidateSessions(): void;
  marks: SweepMarks;
}

/** Fresh marks: the first tick runs every step. */
export function newSweepMarks(): SweepMarks {
  return { lastRetention: 0, lastRevalidate: 0 };
}

/** One sweep at `now` (the numbered steps above). Throws what a step throws. */
export function tick(deps: SweepDeps, now: number): void {
  const { broker, marks } = deps;
  const { store } = broker;
  // 1. Retention of acknowledged messages, idempotency keys and unnamed blobs.
  if (now - marks.lastRetention > RETENTION_SWEEP_MS) {
    marks.lastRetention = now;
    store.transaction(() => {
      store.outbox.prune(now - ACKED_OUTBOX_RETENTION_MS);
      store.idempotency.prune(now - IDEMPOTENCY_RETENTION_MS);
    });
    startBlobCollection(broker);
  }
  // 2. Live sessions re-checked.
  if (now - marks.lastRevalidate > REVALIDATE_MS) {
    marks.lastRevalidate = now;
    deps.revalidateSessions();
  }
  // 3. Proposals past their TTL.
  expireProposals(broker);
  sweepGrants(broker);
  // 4. Execution deadlines.
  sweepExecutions(broker, broker.cluster.fleet);
  // 5. A scheduling pass.
  broker.cluster.requestPass();
}

/** Step 1's blob collection, unless one is under way; it goes on after the tick returns. */
function startBlobCollection(broker: BrokerDeps): void {
  const { runtime } = broker;
  if (runtime.blobCollection !== null) return;
  const running: Promise<void> = collectBlobGarbageInBatches(broker)
    .then(
      () => undefined,
      (err: unknown) => broker.logger.error({ err }, 'blob garbage collection failed'),
    )
    .finally(() => {
      if (runtime.blobCollection === running) runtime.blobCollection = null;
    });
  runtime.blobCollection = running;
}

/** Step 3: expires proposals past their TTL, at most `batch` per call; returns how many. */
export function expireProposals(deps: BrokerDeps, batch = 100): number {
  const now = deps.clock.now();
  let expired = 0;
  deps.store.transaction(() => {
    for (const p of deps.store.proposals.expiredBy(now, batch)) {
      const expiresAt = p.expires_at === null ? null : new Date(p.expires_at).toISOString();
      moveProposal(deps, p, 'expire', 'sweeper', {}, { expires_at: expiresAt });
      expired++;
    }
  });
  return expired;
}

/**
 * Garbage collection of blobs no live revision or recent task names, all in one transaction; returns
 * how many. The sweep collects batch by batch instead (blob-gc.ts); this stays for tools and tests.
 */
export function collectBlobGarbage(
  deps: BrokerDeps,
  graceMs = deps.config.storage.blob_grace_seconds * 1000,
): number {
  const now = deps.clock.now();
  return deps.store.transaction(() => deps.store.blobs.collectGarbage(now - graceMs, now - graceMs));
}
