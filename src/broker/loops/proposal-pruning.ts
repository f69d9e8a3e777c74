import {
  type PruningPolicy,
  proposalVerdict,
  pruneCutoffs,
  pruningEnabled,
  revisionVerdict,
} from '../../domain/retention/proposal-pruning.js';
import type { Clock } from '../../platform/clock.js';
import type { Logger } from '../../platform/logger.js';
import type { Store } from '../../store/store.js';

/**
 * Pruning of abandoned proposals and old unreviewed revisions (master config
 * `pruning`; the rules are src/domain/retention/proposal-pruning.ts). Each run:
 *
 * 1. walks CANCELLED/EXPIRED proposals untouched for `proposal_days` with no review and no task, and
 *    deletes each with its revisions (audit `proposal.pruned`);
 * 2. walks revisions older than `revision_days`, oldest first, and deletes those the rules let go
 *    (audit `proposal.revisions_pruned`, one row per proposal per batch, naming the revisions).
 *
 * Like task retention (task-retention.ts) it works in batches of `batch_size`, one transaction each,
 * re-deciding inside the transaction, and yields to the event loop between them, so a request waits at
 * most one batch. Runs never overlap. Freed revisions stop counting against their writer's
 * `quotas.max_revision_bytes` at once (triggers), and their blobs become collectable by the sweep.
 */

/** Pruning settings (`pruning`). */
export interface ProposalPruningOptions extends PruningPolicy {
  batch_size: number;
  /** Yields to the event loop between batches; tests may count. */
  yieldToLoop?: () => Promise<void>;
}

/** What one run deleted. */
export interface PruneResult {
  proposals: number;
  revisions: number;
}

/** The prune loop; `run()` is called on a timer by the master. */
export class ProposalPruning {
  private running: Promise<PruneResult> | null = null;
  private stopped = false;
  private readonly yieldToLoop: () => Promise<void>;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly opts: ProposalPruningOptions,
    private readonly logger?: Logger,
  ) {
    this.yieldToLoop = opts.yieldToLoop ?? (() => new Promise((resolve) => setImmediate(resolve)));
  }

  /** One run over both rules; a call while one runs resolves with that one. */
  run(): Promise<PruneResult> {
    if (this.running) return this.running;
    const both = async (): Promise<PruneResult> => {
      const now = this.clock.now();
      const proposals = await this.pruneProposals(now);
      const revisions = await this.pruneRevisions(now);
      if (proposals.proposals + revisions > 0)
        this.logger?.info({ ...proposals, old_revisions: revisions }, 'proposal pruning deleted');
      return { proposals: proposals.proposals, revisions: proposals.revisions + revisions };
    };
    this.running = both().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** Ends a run in progress at its next batch boundary; later runs do nothing. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.running?.catch(() => undefined);
  }

  private async pruneProposals(now: number): Promise<PruneResult> {
    const done = { proposals: 0, revisions: 0 };
    if (!pruningEnabled(this.opts).proposals) return done;
    const cutoff = pruneCutoffs(this.opts, now).proposals;
    let cursor = '';
    while (!this.stopped) {
      const seen = this.store.transaction(() => {
        const batch = this.store.proposals.abandoned(cutoff, cursor, this.opts.batch_size);
        for (const p of batch) {
          cursor = p.id;
          const facts = {
            state: p.state,
            updated_at: p.updated_at,
            decided: false,
            has_task: p.task_id !== null,
          };
          if (proposalVerdict(facts, this.opts, now) !== 'prune') continue;
          const revisions = this.store.proposals.deleteProposal(p.id);
          this.store.audit.append({
            at: now,
            actor: 'pruner',
            action: 'proposal.pruned',
            subject_type: 'proposal',
            subject_id: p.id,
            data: { state: p.state, updated_at: new Date(p.updated_at).toISOString(), revisions },
          });
          done.proposals++;
          done.revisions += revisions;
        }
        return batch.length;
      });
      if (seen < this.opts.batch_size) break;
      await this.yieldToLoop();
    }
    return done;
  }

  private async pruneRevisions(now: number): Promise<number> {
    if (!pruningEnabled(this.opts).revisions) return 0;
    const cutoff = pruneCutoffs(this.opts, now).revisions;
    let cursor = { created_at: Number.MIN_SAFE_INTEGER, id: '' };
    let pruned = 0;
    while (!this.stopped) {
      const seen = this.store.transaction(() => {
        const batch = this.store.proposals.pruneCandidates(cutoff, cursor, this.opts.batch_size);
        const byProposal = new Map<string, Array<{ revision_id: string; number: number }>>();
        for (const r of batch) {
          cursor = { created_at: r.created_at, id: r.id };
          if (revisionVerdict(r, this.opts, now) !== 'prune') continue;
          if (!this.store.proposals.deleteRevision(r.id)) continue;
          const list = byProposal.get(r.proposal_id) ?? [];
          list.push({ revision_id: r.id, number: r.number });
          byProposal.set(r.proposal_id, list);
          pruned++;
        }
        for (const [proposalId, revisions] of byProposal)
          this.store.audit.append({
            at: now,
            actor: 'pruner',
            action: 'proposal.revisions_pruned',
            subject_type: 'proposal',
            subject_id: proposalId,
            data: { revisions, older_than_days: this.opts.revision_days },
          });
        return batch.length;
      });
      if (seen < this.opts.batch_size) break;
      await this.yieldToLoop();
    }
    return pruned;
  }
}
