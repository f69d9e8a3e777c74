import { accepts, isFinal, type TransitionTable } from './state-machine.js';

/**
 * Lease state machine (docs/state-machines.md). A card is never free on a guess: only a cleanup receipt or an
 * audited operator reconcile releases a card.
 *
 * States:
 * - `ACTIVE`: the lease binds its cards to one execution.
 * - `RELEASING`: the execution ended; waiting for the worker's cleanup receipt.
 * - `RELEASED` (terminal): cleanup confirmed; the cards are free.
 * - `QUARANTINED`: cleanup not confirmed in time, or the worker was lost; the cards stay out of the pool.
 *   A worker that comes back listing the lease's execution as still alive, under the same epoch, takes
 *   it back to `ACTIVE` (`worker_returned`): the cards were never freed, so nothing else holds them.
 * `withdrawn` releases a lease whose execution never started and never can: the master took back its
 * assign before recording an acceptance, from a worker that starts nothing unacknowledged
 * (docs/operations.md "Partitions"). That is proof, not a guess: the worker's own records hold the cards until it ends it.
 */
export const LEASE_STATES = ['ACTIVE', 'RELEASING', 'RELEASED', 'QUARANTINED'] as const;
/** A lease state. */
export type LeaseState = (typeof LEASE_STATES)[number];

/** Events that move a lease. */
export const LEASE_EVENTS = [
  'execution_ended',
  'cleaned',
  'quarantine',
  'reconcile_release',
  'worker_returned',
  'withdrawn',
] as const;
/** A lease event. */
export type LeaseEvent = (typeof LEASE_EVENTS)[number];

/** The lease transition table; docs/state-machines.md shows it. */
export const LEASE_TABLE: TransitionTable<LeaseState, LeaseEvent> = {
  ACTIVE: {
    execution_ended: 'RELEASING',
    cleaned: 'RELEASED',
    quarantine: 'QUARANTINED',
    withdrawn: 'RELEASED',
  },
  RELEASING: { cleaned: 'RELEASED', quarantine: 'QUARANTINED' },
  QUARANTINED: {
    cleaned: 'RELEASED',
    reconcile_release: 'RELEASED',
    worker_returned: 'ACTIVE',
    withdrawn: 'RELEASED',
  },
  RELEASED: {},
};

/** Whether LEASE_TABLE lets `event` move a lease that is `state` (the guard, never a list of states). */
export function leaseAccepts(state: LeaseState, event: LeaseEvent): boolean {
  return accepts(LEASE_TABLE, state, event);
}

/** Whether a lease in `state` still holds its cards: every state but the final one (RELEASED). */
export function leaseHoldsCards(state: LeaseState): boolean {
  return !isFinal(LEASE_TABLE, state);
}

/** `lease_epoch` for a new lease: 1 + the highest epoch ever issued for any of its cards; never reused. */
export function nextLeaseEpoch(highestEpochPerCard: readonly number[]): number {
  let max = 0;
  for (const e of highestEpochPerCard) if (e > max) max = e;
  return max + 1;
}
