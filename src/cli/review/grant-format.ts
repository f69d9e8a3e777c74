import { currentScope, type GrantScope } from '../../contracts/standing-grant.js';
import { extraArgsReach } from '../../domain/grants/grant.js';
import { escapeField, table } from '../common/output.js';

/**
 * `gpu-broker grant show` in words (ADR 0029): what the grant lets run without a review, one clause
 * per line as the dashboard's grants pane words it, the requester's reason marked as submitter text, and
 * every run it approved with its charge and what it changed against the base. Pure.
 */

export interface GrantShow {
  grant: {
    grant_id: string;
    state: string;
    grantee: string;
    requested_by: string;
    decided_by: string | null;
    base_revision_id: string;
    scope: GrantScope;
    /** What arguments past the prefix reach, in words (absent from an older master's answer). */
    extra_args_reach?: string;
    reason: string;
    decision_comment: string | null;
    budget: {
      runs_used: number;
      max_runs: number;
      card_hours_charged: number;
      card_hours_reserved: number;
      max_card_hours: number;
      running: number;
      concurrency: number;
      breaker_k: number;
      consecutive_failures: number;
    };
    expires_at: string;
  };
  runs: Array<{
    task_id: string;
    cards: number;
    card_seconds_charged: number | null;
    card_seconds_reserved: number;
    outcome: string | null;
    diff_against_base: Array<Record<string, unknown>>;
  }>;
}

/**
 * The scope's clauses as [name, words]. `reach` is the master's `extra_args_reach`; an older master's
 * answer lacks it, and then it is worded here from the scope (a boolean `extra_args` read as stored
 * grants are: true as "script").
 */
export function scopeClauses(scope: GrantScope, reach?: string): Array<[string, string]> {
  const env = scope.env.map((e) =>
    e.values === undefined ? e.name : `${e.name} ∈ {${e.values.join(', ')}}`,
  );
  const l = scope.limits;
  const current = currentScope(scope);
  return [
    ['runs', `${scope.argv_prefix.join(' ')}${current.extra_args === 'none' ? ' (exactly)' : ' …'}`],
    ['extra arguments', reach ?? extraArgsReach(current)],
    ['may change', scope.mutable_inputs.length === 0 ? 'no input' : scope.mutable_inputs.join(', ')],
    ['everything else', 'byte-equal to the base revision'],
    [
      'at most',
      `${scope.max_cards} card(s), ${scope.max_time_limit_seconds} s, priority ${scope.max_priority}`,
    ],
    ['limits', `memory ${l.memory_mib} MiB, pids ${l.pids}, /tmp ${l.tmp_mib} MiB, disk ${l.disk_mib} MiB`],
    ['workers', scope.workers === null ? 'any' : scope.workers.join(', ')],
    ['env that may change', env.length === 0 ? 'none' : env.join(', ')],
    ['image', scope.image ?? 'none (process runtime)'],
    ['network', 'none (a grant never covers network)'],
  ];
}

/** Paths a run changed against the grant's base, e.g. "modified train.py". */
function changed(diff: Array<Record<string, unknown>>): string {
  if (diff.length === 0) return 'nothing';
  return diff
    .map((d) => `${String(d['change'] ?? d['kind'] ?? 'changed')} ${String(d['path'] ?? '?')}`)
    .join(', ');
}

/** The whole `grant show` text. Submitter-written values pass through escapeField. */
export function formatGrantShow(out: GrantShow): string {
  const g = out.grant;
  const b = g.budget;
  const head = [
    `${g.grant_id}  ${g.state}`,
    `grantee ${escapeField(g.grantee)}, requested by ${escapeField(g.requested_by)}, decided by ${escapeField(g.decided_by ?? '–')}`,
    `base revision ${g.base_revision_id}; expires ${g.expires_at}`,
    `budget: runs ${b.runs_used}/${b.max_runs}, card-hours ${b.card_hours_charged} charged + ${b.card_hours_reserved} reserved of ${b.max_card_hours}, running ${b.running}/${b.concurrency}, failures in a row ${b.consecutive_failures}/${b.breaker_k}`,
    '',
    'lets run without a review:',
    ...scopeClauses(g.scope, g.extra_args_reach).map(([k, v]) => `  ${k.padEnd(20)} ${escapeField(v)}`),
    '',
    `reason (written by the requester): ${escapeField(g.reason)}`,
    ...(g.decision_comment === null ? [] : [`decision comment: ${escapeField(g.decision_comment)}`]),
    '',
  ];
  if (out.runs.length === 0) return [...head, 'runs: none yet'].join('\n');
  const rows = out.runs.map((r) => [
    r.task_id,
    r.cards,
    r.card_seconds_charged === null ? `(${r.card_seconds_reserved} reserved)` : r.card_seconds_charged,
    r.outcome ?? 'running',
    escapeField(changed(r.diff_against_base)),
  ]);
  return [...head, table(['TASK', 'CARDS', 'CARD-S', 'OUTCOME', 'CHANGED AGAINST THE BASE'], rows)].join(
    '\n',
  );
}
