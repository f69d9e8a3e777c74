import { h, orDash } from './dom.js';
import { empty, pill, short, time } from './render.js';
import { visible } from './visible.js';

/**
 * The standing-grants pane (issue 23 §1): every grant the token may see, newest first, with its state,
 * grantee, budgets used (a budget at 80 % or more is marked), expiry, and under each one what it lets run
 * without review (its scope) and the requester's reason, marked as written by the submitter. A REQUESTED
 * grant can be approved or rejected here, an ACTIVE or SUSPENDED one revoked (optionally cancelling the
 * tasks it approved); the master decides who may (never the grantee, SELF_GRANT_FORBIDDEN), so the pane
 * shows every action and the error when one is refused.
 */

const HIGH = 0.8;

/** The decisions each state offers: [label, action, button class]. */
const ACTIONS = {
  REQUESTED: [
    ['Approve grant', { kind: 'decide', decision: 'APPROVE' }, 'button primary'],
    ['Reject', { kind: 'decide', decision: 'REJECT' }, 'button'],
  ],
  ACTIVE: [
    ['Revoke', { kind: 'revoke', cancel_running: false }, 'button'],
    ['Revoke and cancel its tasks', { kind: 'revoke', cancel_running: true }, 'button'],
  ],
  SUSPENDED: [['Revoke', { kind: 'revoke', cancel_running: false }, 'button']],
};

function budgetCell(used, max, unit = '') {
  const ratio = max > 0 ? used / max : 1;
  return h('td', { class: ratio >= HIGH ? 'warn-text' : '' }, `${used}${unit} / ${max}${unit}`);
}

/**
 * One line per clause of the scope, in words a reviewer reads before approving. `reach` is the master's
 * `extra_args_reach`: where arguments past the prefix go ("WIDENED: …" when they reach a launcher).
 */
export function scopeLines(scope, reach) {
  const env = scope.env.map((e) =>
    e.values === undefined ? e.name : `${e.name} ∈ {${e.values.join(', ')}}`,
  );
  return [
    ['runs', [scope.argv_prefix.join(' '), scope.extra_args === 'none' ? ' (exactly)' : ' …']],
    ['extra arguments', reach ?? String(scope.extra_args)],
    ['may change', scope.mutable_inputs.length === 0 ? 'no input' : scope.mutable_inputs.join(', ')],
    ['everything else', 'byte-equal to the base revision'],
    [
      'at most',
      `${scope.max_cards} card(s), ${scope.max_time_limit_seconds} s, priority ${scope.max_priority}`,
    ],
    [
      'limits',
      `memory ${scope.limits.memory_mib} MiB, pids ${scope.limits.pids}, /tmp ${scope.limits.tmp_mib} MiB, disk ${scope.limits.disk_mib} MiB`,
    ],
    ['workers', scope.workers === null ? 'any' : scope.workers.join(', ')],
    ['env that may change', env.length === 0 ? 'none' : env.join(', ')],
    ['image', orDash(scope.image)],
    ['network', 'none (a grant never covers network)'],
  ];
}

function scopeView(g) {
  return h(
    'dl',
    { class: 'grant-scope small' },
    scopeLines(g.scope, g.extra_args_reach).flatMap(([k, v]) => [
      h('dt', {}, k),
      h(
        'dd',
        { class: k === 'extra arguments' && String(v).startsWith('WIDENED') ? 'warn-text' : '' },
        visible(v),
      ),
    ]),
    h('dt', {}, 'reason (written by the requester)'),
    h('dd', { class: 'untrusted' }, visible(g.reason, { lines: true })),
    g.decision_comment === null ? null : [h('dt', {}, 'decision'), h('dd', {}, visible(g.decision_comment))],
  );
}

function actionsView(g, onAction) {
  const actions = ACTIONS[g.state] ?? [];
  if (actions.length === 0 || onAction === undefined) return null;
  const result = h('div', { class: 'grant-result' });
  const comment = h('input', {
    class: 'comment',
    placeholder: 'Comment (optional)',
    'aria-label': 'Comment',
  });
  const buttons = actions.map(([label, action, cls]) =>
    h(
      'button',
      {
        class: cls,
        type: 'button',
        onclick: (e) => onAction(g, { ...action, comment: comment.value }, e.currentTarget, result),
      },
      label,
    ),
  );
  return h('div', { class: 'actions' }, comment, ...buttons, result);
}

function grantRows(g, onAction) {
  return [
    h(
      'tr',
      { dataset: { grant: g.grant_id } },
      h('td', {}, short(g.grant_id, 16)),
      h('td', {}, pill(g.state)),
      h('td', {}, g.grantee),
      budgetCell(g.budget.runs_used, g.budget.max_runs),
      budgetCell(
        Math.round((g.budget.card_hours_charged + g.budget.card_hours_reserved) * 100) / 100,
        g.budget.max_card_hours,
      ),
      h('td', {}, `${g.budget.running} / ${g.budget.concurrency}`),
      h('td', {}, time(g.expires_at)),
      h('td', {}, orDash(g.decided_by)),
    ),
    h(
      'tr',
      { class: 'grant-detail', dataset: { grantDetail: g.grant_id } },
      h(
        'td',
        { colspan: '8' },
        h('details', {}, h('summary', {}, 'Scope and reason'), scopeView(g)),
        actionsView(g, onAction),
      ),
    ),
  ];
}

/** Rows of the grants table; `onAction(grant, action, button, resultBox)` decides or revokes one. */
export function renderGrants(grants, onAction) {
  if (grants.length === 0) return [empty('No standing grants. An agent requests one with request_grant.')];
  const head = ['Grant', 'State', 'Grantee', 'Runs', 'Card-hours', 'Running', 'Expires', 'Decided by'];
  return [
    h(
      'table',
      { class: 'table' },
      h('thead', {}, h('tr', {}, ...head.map((t) => h('th', {}, t)))),
      h(
        'tbody',
        {},
        grants.flatMap((g) => grantRows(g, onAction)),
      ),
    ),
  ];
}
