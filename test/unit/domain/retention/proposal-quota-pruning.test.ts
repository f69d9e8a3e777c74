import { describe, expect, it } from 'vitest';
import { proposalVerdict, revisionVerdict } from '../../../../src/domain/retention/proposal-pruning.js';
import { type ProposalQuotas, revisionQuotaBreach } from '../../../../src/domain/retention/proposal-quota.js';

const caps: ProposalQuotas = {
  max_open_proposals: 3,
  max_revisions_per_proposal: 10,
  max_revisions_per_hour: 20,
  max_revision_bytes: 1000,
};
const usage = {
  opens_proposal: true,
  open_proposals: 0,
  revision_number: 1,
  revisions_last_hour: 0,
  stored_bytes: 0,
  new_bytes: 100,
};

describe('revisionQuotaBreach', () => {
  it('passes under every cap and names the first one broken', () => {
    expect(revisionQuotaBreach(usage, caps)).toBeNull();
    expect(revisionQuotaBreach({ ...usage, open_proposals: 3 }, caps)?.cap).toBe('max_open_proposals');
    // Revising does not open a proposal, so the open cap does not apply.
    expect(revisionQuotaBreach({ ...usage, opens_proposal: false, open_proposals: 3 }, caps)).toBeNull();
    expect(revisionQuotaBreach({ ...usage, revision_number: 11 }, caps)?.cap).toBe(
      'max_revisions_per_proposal',
    );
    expect(revisionQuotaBreach({ ...usage, revisions_last_hour: 20 }, caps)?.cap).toBe(
      'max_revisions_per_hour',
    );
    expect(revisionQuotaBreach({ ...usage, stored_bytes: 901 }, caps)).toMatchObject({
      cap: 'max_revision_bytes',
      limit: 1000,
      used: 901,
    });
    expect(revisionQuotaBreach({ ...usage, stored_bytes: 900 }, caps)).toBeNull(); // exactly at the cap
  });

  it('a null cap is off', () => {
    const off: ProposalQuotas = {
      max_open_proposals: null,
      max_revisions_per_proposal: null,
      max_revisions_per_hour: null,
      max_revision_bytes: null,
    };
    expect(
      revisionQuotaBreach(
        { ...usage, open_proposals: 1e6, revision_number: 1e6, revisions_last_hour: 1e6, stored_bytes: 1e12 },
        off,
      ),
    ).toBeNull();
  });
});

describe('pruning verdicts', () => {
  const policy = { enabled: true, revision_days: 7, proposal_days: 30 };
  const now = 100 * 86_400_000;
  const old = now - 8 * 86_400_000;
  const r = { created_at: old, current: false, decided: false, ran: false };

  it('prunes an old unreviewed revision, never a decided, ran, current or young one', () => {
    expect(revisionVerdict(r, policy, now)).toBe('prune');
    expect(revisionVerdict({ ...r, decided: true }, policy, now)).toBe('decided');
    expect(revisionVerdict({ ...r, ran: true }, policy, now)).toBe('ran');
    expect(revisionVerdict({ ...r, current: true }, policy, now)).toBe('current');
    expect(revisionVerdict({ ...r, created_at: now - 86_400_000 }, policy, now)).toBe('young');
    expect(revisionVerdict(r, { ...policy, revision_days: 0 }, now)).toBe('disabled');
    expect(revisionVerdict(r, { ...policy, enabled: false }, now)).toBe('disabled');
  });

  it('prunes a whole proposal only when abandoned (cancelled/expired, never judged, no task) and old', () => {
    const p = { state: 'CANCELLED', updated_at: now - 31 * 86_400_000, decided: false, has_task: false };
    expect(proposalVerdict(p, policy, now)).toBe('prune');
    expect(proposalVerdict({ ...p, state: 'EXPIRED' }, policy, now)).toBe('prune');
    for (const state of ['DRAFT', 'IN_REVIEW', 'CHANGES_REQUESTED', 'APPROVED', 'REJECTED'])
      expect(proposalVerdict({ ...p, state }, policy, now)).toBe('not_abandoned');
    expect(proposalVerdict({ ...p, decided: true }, policy, now)).toBe('decided');
    expect(proposalVerdict({ ...p, has_task: true }, policy, now)).toBe('decided');
    expect(proposalVerdict({ ...p, updated_at: now - 86_400_000 }, policy, now)).toBe('young');
  });
});
