import { applyTransition, type TransitionResult, type TransitionTable } from './state-machine.js';

/**
 * Proposal state machine (docs/state-machines.md).
 *
 * States:
 * - `DRAFT`: being written; revisions may be added; not visible to reviewers.
 * - `IN_REVIEW`: one confirmed revision awaits an independent reviewer.
 * - `CHANGES_REQUESTED`: a reviewer asked for changes; the owner revises (→ DRAFT).
 * - `APPROVED` (terminal): the confirmed revision became a task.
 * - `REJECTED` (terminal): a reviewer refused it.
 * - `CANCELLED` (terminal): the owner or an operator withdrew it.
 * - `EXPIRED` (terminal): untouched past its TTL; set by the sweeper, never lazily.
 */
export const PROPOSAL_STATES = [
  'DRAFT',
  'IN_REVIEW',
  'CHANGES_REQUESTED',
  'APPROVED',
  'REJECTED',
  'CANCELLED',
  'EXPIRED',
] as const;
/** A proposal state. */
export type ProposalState = (typeof PROPOSAL_STATES)[number];

/** Events that move a proposal. */
export const PROPOSAL_EVENTS = [
  'revise',
  'confirm',
  'approve',
  'request_changes',
  'reject',
  'cancel',
  'expire',
] as const;
/** A proposal event. */
export type ProposalEvent = (typeof PROPOSAL_EVENTS)[number];

/** The proposal transition table; docs/state-machines.md shows it. */
export const PROPOSAL_TABLE: TransitionTable<ProposalState, ProposalEvent> = {
  DRAFT: { revise: 'DRAFT', confirm: 'IN_REVIEW', cancel: 'CANCELLED', expire: 'EXPIRED' },
  IN_REVIEW: {
    approve: 'APPROVED',
    request_changes: 'CHANGES_REQUESTED',
    reject: 'REJECTED',
    cancel: 'CANCELLED',
    expire: 'EXPIRED',
  },
  CHANGES_REQUESTED: { revise: 'DRAFT', cancel: 'CANCELLED', expire: 'EXPIRED' },
  APPROVED: {},
  REJECTED: {},
  CANCELLED: {},
  EXPIRED: {},
};

/** Applies an event to a proposal state. */
export function transitionProposal(
  state: ProposalState,
  event: ProposalEvent,
): TransitionResult<ProposalState, ProposalEvent> {
  return applyTransition(PROPOSAL_TABLE, state, event);
}

/** True once a proposal can no longer change. */
export function isTerminalProposal(state: ProposalState): boolean {
  return Object.keys(PROPOSAL_TABLE[state]).length === 0;
}

/** Review decisions and the event each one applies. */
export const REVIEW_DECISIONS = {
  APPROVE: 'approve',
  REQUEST_CHANGES: 'request_changes',
  REJECT: 'reject',
} as const;
/** A review decision. */
export type ReviewDecision = keyof typeof REVIEW_DECISIONS;
