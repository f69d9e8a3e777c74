import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  isTerminalProposal,
  PROPOSAL_EVENTS,
  PROPOSAL_STATES,
  PROPOSAL_TABLE,
  type ProposalEvent,
  type ProposalState,
  REVIEW_DECISIONS,
  transitionProposal,
} from '../../../../src/domain/machines/proposal.js';

/**
 * The proposal machine against an independent statement of docs/state-machines.md, written out here edge by
 * edge: DRAFT →confirm→ IN_REVIEW → APPROVED | CHANGES_REQUESTED | REJECTED; CHANGES_REQUESTED →revise→
 * DRAFT; DRAFT →revise→ DRAFT; any non-terminal → CANCELLED | EXPIRED. Terminal: APPROVED, REJECTED,
 * CANCELLED, EXPIRED. If the table and this list ever differ, one of them is wrong.
 */
const DESIGN_EDGES: ReadonlyArray<[ProposalState, ProposalEvent, ProposalState]> = [
  ['DRAFT', 'revise', 'DRAFT'],
  ['DRAFT', 'confirm', 'IN_REVIEW'],
  ['IN_REVIEW', 'approve', 'APPROVED'],
  ['IN_REVIEW', 'request_changes', 'CHANGES_REQUESTED'],
  ['IN_REVIEW', 'reject', 'REJECTED'],
  ['CHANGES_REQUESTED', 'revise', 'DRAFT'],
  ...(['DRAFT', 'IN_REVIEW', 'CHANGES_REQUESTED'] as const).flatMap((s) => [
    [s, 'cancel', 'CANCELLED'] as [ProposalState, ProposalEvent, ProposalState],
    [s, 'expire', 'EXPIRED'] as [ProposalState, ProposalEvent, ProposalState],
  ]),
];
const TERMINAL: readonly ProposalState[] = ['APPROVED', 'REJECTED', 'CANCELLED', 'EXPIRED'];

const edge = (s: ProposalState, e: ProposalEvent) =>
  DESIGN_EDGES.find(([from, ev]) => from === s && ev === e);

const eventArb = fc.constantFrom(...PROPOSAL_EVENTS);
const stateArb = fc.constantFrom(...PROPOSAL_STATES);

describe('proposal transition table', () => {
  it('has exactly the edges listed above, and no others', () => {
    const tableEdges = PROPOSAL_STATES.flatMap((s) =>
      Object.entries(PROPOSAL_TABLE[s]).map(([e, to]) => [s, e, to]),
    );
    const sortKey = (x: unknown[]) => x.join(' ');
    expect(tableEdges.map(sortKey).sort()).toEqual(DESIGN_EDGES.map(sortKey).sort());
  });

  it('answers every (state, event) pair as the design says; refusals list the allowed events', () => {
    fc.assert(
      fc.property(stateArb, eventArb, (state, event) => {
        const t = transitionProposal(state, event);
        const expected = edge(state, event);
        if (expected) {
          expect(t).toEqual({ ok: true, from: state, to: expected[2], event });
        } else {
          expect(t.ok).toBe(false);
          if (!t.ok) {
            expect(t.from).toBe(state);
            expect(new Set(t.allowed)).toEqual(
              new Set(DESIGN_EDGES.filter(([s]) => s === state).map(([, e]) => e)),
            );
            expect(t.allowed).not.toContain(event);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('no sequence of events from DRAFT reaches a state or edge the design forbids', () => {
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 60 }), (events) => {
        let state: ProposalState = 'DRAFT';
        const visited: ProposalState[] = [state];
        for (const event of events) {
          const t = transitionProposal(state, event);
          if (!t.ok) continue; // refused: the state stays as it was.
          expect(edge(state, event)?.[2]).toBe(t.to);
          // Specific invariants, stated once more in words:
          if (t.to === 'APPROVED') expect(state).toBe('IN_REVIEW'); // only a review approves
          if (t.to === 'IN_REVIEW') expect([state, event]).toEqual(['DRAFT', 'confirm']); // only confirmation
          if (TERMINAL.includes(state)) throw new Error(`left terminal state ${state} by ${event}`);
          state = t.to;
          visited.push(state);
        }
        for (const s of visited) expect(PROPOSAL_STATES).toContain(s);
        // Once terminal, always terminal: the first terminal state is also the last one.
        const firstTerminal = visited.findIndex((s) => TERMINAL.includes(s));
        if (firstTerminal >= 0) expect(visited.length - 1).toBe(firstTerminal);
      }),
      { numRuns: 1000 },
    );
  });

  it('every state is reachable from DRAFT and every non-terminal state can still end', () => {
    const reachable = new Set<ProposalState>(['DRAFT']);
    for (let grew = true; grew; ) {
      grew = false;
      for (const s of [...reachable])
        for (const to of Object.values(PROPOSAL_TABLE[s]))
          if (to && !reachable.has(to)) {
            reachable.add(to);
            grew = true;
          }
    }
    expect([...reachable].sort()).toEqual([...PROPOSAL_STATES].sort());
    for (const s of PROPOSAL_STATES) {
      expect(isTerminalProposal(s)).toBe(TERMINAL.includes(s));
      if (!TERMINAL.includes(s)) {
        expect(transitionProposal(s, 'cancel')).toMatchObject({ ok: true, to: 'CANCELLED' });
        expect(transitionProposal(s, 'expire')).toMatchObject({ ok: true, to: 'EXPIRED' });
      }
    }
  });

  it('maps each review decision to the event of the same meaning', () => {
    expect(REVIEW_DECISIONS).toEqual({
      APPROVE: 'approve',
      REQUEST_CHANGES: 'request_changes',
      REJECT: 'reject',
    });
  });
});
