import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ReviewDecision } from '../../../../src/domain/machines/proposal.js';
import { chooseDiffBase, type DecisionKind } from '../../../../src/domain/review/diff-base.js';

/**
 * The reviewer's diff base (docs/security.md "Code the reviewer did not read"; docs/security.md "What a reviewer must read, and what the broker guarantees"): the latest earlier revision a PERSON
 * decided on; every revision after it is listed as one no person read, with an agent's or grant's decision.
 */

const by = (revision: number, decision: ReviewDecision, at: number, kind: DecisionKind = 'person') => ({
  revision_id: `rev_${revision}`,
  decision,
  at,
  kind,
  decided_by: kind === 'person' ? 'rita' : kind === 'grant' ? 'grant grt_1' : 'claude',
});
const undecided = (r: ReturnType<typeof rev>) => ({ ...r, decision: null, kind: null, decided_by: null });
const base = (number: number, decision: ReviewDecision) => ({
  revision_id: `rev_${number}`,
  number,
  digest: `d${number}`,
  decision,
  kind: 'person',
  decided_by: 'rita',
});

const rev = (number: number, confirmed = true) => ({
  revision_id: `rev_${number}`,
  number,
  digest: `d${number}`,
  confirmed,
});

describe('chooseDiffBase', () => {
  it('is nothing for revision 1, and nothing while no earlier revision was decided on', () => {
    expect(chooseDiffBase(1, [rev(1)], [])).toEqual({ base: null, unreviewed_between: [] });
    expect(chooseDiffBase(3, [rev(3), rev(1, false), rev(2)], [])).toEqual({
      base: null,
      unreviewed_between: [undecided(rev(1, false)), undecided(rev(2))],
    });
  });

  it('skips revisions nobody decided on and lists them, oldest first', () => {
    const decisions = [by(1, 'REQUEST_CHANGES', 10)];
    expect(chooseDiffBase(4, [rev(1), rev(2, false), rev(3, false), rev(4)], decisions)).toEqual({
      base: base(1, 'REQUEST_CHANGES'),
      unreviewed_between: [undecided(rev(2, false)), undecided(rev(3, false))],
    });
  });

  it('takes the latest decided revision before the one shown, never the shown one or a later one', () => {
    const decisions = [by(1, 'REQUEST_CHANGES', 10), by(2, 'REQUEST_CHANGES', 20), by(3, 'APPROVE', 30)];
    const all = [rev(1), rev(2), rev(3)];
    expect(chooseDiffBase(3, all, decisions).base?.revision_id).toBe('rev_2');
    expect(chooseDiffBase(2, all, decisions)).toEqual({
      base: base(1, 'REQUEST_CHANGES'),
      unreviewed_between: [],
    });
  });

  it('names the latest decision on the base revision', () => {
    const decisions = [by(1, 'REJECT', 20), by(1, 'REQUEST_CHANGES', 10)];
    expect(chooseDiffBase(2, [rev(1), rev(2)], decisions).base?.decision).toBe('REJECT');
  });

  it('never takes an agent reviewer’s or a grant’s decision as the base, and lists them as not read by a person', () => {
    const all = [rev(1), rev(2), rev(3), rev(4), rev(5)];
    const decisions = [
      by(1, 'REQUEST_CHANGES', 10),
      by(2, 'REQUEST_CHANGES', 20, 'agent_reviewer'),
      by(4, 'APPROVE', 40, 'grant'),
    ];
    expect(chooseDiffBase(5, all, decisions)).toEqual({
      base: base(1, 'REQUEST_CHANGES'),
      unreviewed_between: [
        { ...rev(2), decision: 'REQUEST_CHANGES', kind: 'agent_reviewer', decided_by: 'claude' },
        undecided(rev(3)),
        { ...rev(4), decision: 'APPROVE', kind: 'grant', decided_by: 'grant grt_1' },
      ],
    });
    // With only agents' decisions, the diff is against nothing.
    expect(chooseDiffBase(3, all, [by(1, 'REJECT', 1, 'agent_reviewer')]).base).toBeNull();
  });

  it('property: the base is a person’s decision, and every revision between it and the shown one is listed', () => {
    const kinds: DecisionKind[] = ['person', 'agent_reviewer', 'grant'];
    fc.assert(
      fc.property(
        fc.array(fc.option(fc.constantFrom(...kinds), { nil: undefined }), { minLength: 1, maxLength: 12 }),
        (who) => {
          const revisions = who.map((_, i) => rev(i + 1));
          const decisions = who.flatMap((k, i) => (k ? [by(i + 1, 'REQUEST_CHANGES', i, k)] : []));
          const shown = who.length + 1;
          const c = chooseDiffBase(shown, revisions, decisions);
          const lastPerson = who.lastIndexOf('person') + 1;
          expect(c.base?.number ?? 0).toBe(lastPerson);
          expect(c.unreviewed_between.map((r) => r.number)).toEqual(
            revisions.filter((r) => r.number > lastPerson).map((r) => r.number),
          );
          expect(c.unreviewed_between.every((r) => r.kind !== ('person' as never))).toBe(true);
        },
      ),
    );
  });
});
