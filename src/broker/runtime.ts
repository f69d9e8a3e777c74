import type { TextInspection } from '../domain/policy/text-inspection.js';
import type { MasterConfig } from '../platform/config.js';
import { DiffMemo } from './diff-memo.js';
import { TimeBudget, TurnGate, WaitCounter } from './fair-share.js';
import { PrincipalShare } from './principal-share.js';
import { VerifiedCache } from './verified-cache.js';

/**
 * The master's in-memory state that use cases keep between calls (docs/architecture.md): caches, shares and
 * the work under way, all here rather than in module-level maps, so two masters in one process never
 * share any of it and a reader of `deps` sees all of it (`deps.runtime`). Made once per master by
 * src/master/compose.ts and by the test fixture (test/support/deps.ts). None of it is durable: a
 * restart starts empty, and nothing here decides what the store says (each cache is keyed by digests,
 * whose bytes never change, or holds counts of calls now running).
 *
 * test/unit/boundaries/module-state.test.ts fails on a new module-level mutable in src/broker/ or
 * src/domain/: such state belongs here.
 */

/** The master's per-principal costs (tools/tool-cost.ts, the dispatcher). */
export interface CostShares {
  /** The heavy lane: `quotas.heavy_calls_per_principal` at once, `heavy_queued_per_principal` waiting. */
  heavy: PrincipalShare;
  /** The time budget of heavy calls (`quotas.heavy_ms_per_second`, `heavy_burst_ms`). */
  budget: TimeBudget;
  /** The long-polls held (`quotas.waits_per_principal`). */
  waits: WaitCounter;
  /** The event-loop turns heavy parts take, principals in turn. */
  turns: TurnGate;
}

/** One master's in-memory state, by the use case that keeps it. */
export interface BrokerRuntime {
  /** Text inspections of input blobs by (owner, sha256, path), least recently used first (inspection-memo.ts). */
  readonly inspections: Map<string, TextInspection>;
  /** The reviewer's file diffs by digest pair (tools/revision-diff.ts). */
  readonly diffs: DiffMemo;
  /** get_revision's per-reader share (`quotas.diff_calls_per_reader`, `diff_queued_per_reader`; ADR 0035). */
  readonly diffShare: PrincipalShare;
  /** Heavy and waiting calls' per-principal costs (tools/tool-cost.ts). */
  readonly costs: CostShares;
  /** Paged reads' verified chunk digests and content (verified-blob.ts `verifiedPages`). */
  readonly verified: VerifiedCache;
  /** The sweep's blob collection under way (loops/sweep.ts; one at a time), or null. */
  blobCollection: Promise<void> | null;
}

/** A master's runtime, empty, with its shares sized from `config.quotas`. */
export function createBrokerRuntime(config: Pick<MasterConfig, 'quotas'>): BrokerRuntime {
  const q = config.quotas;
  return {
    inspections: new Map(),
    diffs: new DiffMemo(),
    diffShare: new PrincipalShare('get_revision', q.diff_calls_per_reader, q.diff_queued_per_reader),
    costs: {
      heavy: new PrincipalShare('heavy read', q.heavy_calls_per_principal, q.heavy_queued_per_principal),
      budget: new TimeBudget(q.heavy_ms_per_second, q.heavy_burst_ms),
      waits: new WaitCounter(q.waits_per_principal),
      turns: new TurnGate(),
    },
    verified: new VerifiedCache(),
    blobCollection: null,
  };
}
