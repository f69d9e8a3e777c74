import type { SpanRung } from '../../src/domain/qualification/ladder.js';
import type { PostRecords, RunFacts, RungRecords } from '../verify/verifier.js';
import type { AgentKind } from './agent-submitter.js';

/** What a qualification run is given (runner.ts runs it; src/master/qualification-service.ts builds it). */

/** What the runner needs from the master's side. */
export interface RunnerHooks {
  /** Records a progress line (cards null: a run-level step). */
  step(cards: number | null, text: string): void;
  /**
   * What the master recorded for a rung (perNode: a span rung's; migProfile: a slice rung's; proposal
   * null: nothing was proposed).
   */
  collectRung(
    cards: number,
    perNode: number | null,
    proposalId: string | null,
    migProfile: string | null,
  ): RungRecords;
  /** The post-conditions, as the master sees them now. */
  collectPost(): PostRecords;
}

/** A principal the runner acts as. */
export interface ActingPrincipal {
  name: string;
  token: string;
}

/** Everything one run needs. */
export interface RunnerOptions {
  facts: RunFacts;
  requested: number[];
  /** The counts to run, ascending. */
  ladder: number[];
  /**
   * The single-card GEMM rungs on MIG slices, run before the ladder (ADR 0046): the reserved slice's
   * label and its profile (null: the worker no longer reports it, so the rung is not run). Absent: none.
   */
  slices?: Array<{ card: string; profile: string | null }>;
  /** A Slurm pool's two-node rung, run after the ladder (ADR 0017); null or absent: none. */
  span?: SpanRung | null;
  skipped: Array<{ cards: number; reason: string }>;
  worker: { hostname: string | null; provider: string | null };
  submitterKind: 'scripted' | AgentKind;
  submitter: ActingPrincipal;
  reviewer: ActingPrincipal;
  /** The master's base URL and the CA that signed its certificate (null: publicly trusted or plain HTTP). */
  masterUrl: string;
  caPem: string | null;
  caFile: string | null;
  /** For claude/codex: a client kit for this master, a scratch dir, the agent's environment. */
  agent?: {
    kitDir: string;
    workDir: string;
    env: Readonly<Record<string, string | undefined>>;
    timeoutMs: number;
  };
  startedAt: number;
  /** Longest a rung may take from proposal to settled task (default: the spec's time limit + 5 min). */
  rungTimeoutMs?: number;
  /** Longest to wait for leases and cards to settle after a rung or the ladder (default 30 s). */
  settleTimeoutMs?: number;
  now?: () => number;
}
