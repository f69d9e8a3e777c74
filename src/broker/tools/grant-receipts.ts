import type { InputFile } from '../../contracts/task-spec.js';
import type { Principal } from '../../store/principals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { grantView, loadVisibleGrant } from './grants.js';
import { specChanges } from './revision-diff.js';
import { iso } from './views.js';

/**
 * get_grant: a grant with every run it approved — the receipt (matched clauses, budget before and
 * after), the charge, and what that revision changed against the grant's base: the spec diff
 * (revision-diff.ts specChanges) and the input manifest's changed paths with their digests. Text diffs
 * of files are get_revision's (bounded per call); here a reviewer sees which files moved.
 */
export function getGrant(deps: BrokerDeps, principal: Principal, grantId: string) {
  const g = loadVisibleGrant(deps, principal, grantId);
  const base = deps.store.proposals.revision(g.base_revision_id) ?? null;
  const runs = deps.store.grants.runs(g.id).map((run) => {
    const r = deps.store.proposals.revision(run.revision_id);
    const diff = r
      ? [
          ...specChanges(base, r).map((c) => ({ kind: 'spec', ...c })),
          ...manifestChanges(base?.spec.inputs ?? [], r.spec.inputs ?? []),
        ]
      : [];
    return {
      task_id: run.task_id,
      proposal_id: run.proposal_id,
      revision_id: run.revision_id,
      cards: run.cards,
      card_seconds_reserved: run.card_seconds_reserved,
      card_seconds_charged: run.card_seconds_charged,
      outcome: run.outcome,
      receipt: run.receipt,
      diff_against_base: diff,
      created_at: iso(run.created_at),
    };
  });
  return {
    grant: grantView(deps, g),
    runs,
    untrusted_fields: ['grant.reason', 'grant.scope', 'grant.decision_comment', 'runs[].diff_against_base'],
  };
}

/** Paths added, removed or modified between two input manifests, sorted. */
function manifestChanges(before: readonly InputFile[], after: readonly InputFile[]) {
  const a = new Map(before.map((i) => [i.path, i]));
  const b = new Map(after.map((i) => [i.path, i]));
  const out: Array<Record<string, unknown>> = [];
  for (const path of [...new Set([...a.keys(), ...b.keys()])].sort()) {
    const x = a.get(path);
    const y = b.get(path);
    if (x && y && x.sha256 === y.sha256 && (x.executable ?? false) === (y.executable ?? false)) continue;
    out.push({
      kind: 'input',
      path,
      change: !x ? 'added' : !y ? 'removed' : 'modified',
      before: x ? { sha256: x.sha256, size: x.size } : null,
      after: y ? { sha256: y.sha256, size: y.size } : null,
    });
  }
  return out;
}
