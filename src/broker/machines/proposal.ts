import { isTerminalProposal, PROPOSAL_TABLE, type ProposalEvent } from '../../domain/machines/proposal.js';
import type { ProposalRecord } from '../../store/proposals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { proposalTopic, REVIEW_QUEUE_TOPIC } from '../topics.js';
import { applyMove } from './apply-move.js';

/** Applies a proposal event with compare-and-set, appends the audit row, and schedules notifications. */
export function moveProposal(
  deps: BrokerDeps,
  p: ProposalRecord,
  event: ProposalEvent,
  actor: string,
  changes: Partial<Pick<ProposalRecord, 'current_revision_id' | 'task_id'>> = {},
  data: Record<string, unknown> = {},
): ProposalRecord {
  return applyMove(deps, {
    kind: 'proposal',
    table: PROPOSAL_TABLE,
    record: p,
    event,
    actor,
    next: (to, now) => ({
      ...p,
      ...changes,
      state: to,
      updated_at: now,
      expires_at: isTerminalProposal(to) ? null : now + deps.config.timing.proposal_ttl_seconds * 1000,
    }),
    save: (next, expected) => deps.store.proposals.update(next, expected),
    data,
    topics: [proposalTopic(p.id), REVIEW_QUEUE_TOPIC],
  });
}
