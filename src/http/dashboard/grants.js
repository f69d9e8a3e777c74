import { h } from './dom.js';
import { empty, pill, short, time } from './render.js';

/**
 * The standing-grants pane (issue 23 §1): every grant the token may see, newest first, with its state,
 * grantee, budgets used (a budget at 80 % or more is marked) and expiry. Read-only: decisions are
 * `gpu-broker grant approve|reject|revoke` or the MCP tools.
 */

const HIGH = 0.8;

function budgetCell(used, max, unit = '') {
  const ratio = max > 0 ? used / max : 1;
  return h('td', { class: ratio >= HIGH ? 'warn-text' : '' }, `${used}${unit} / ${max}${unit}`);
}

/** Rows of the grants table. */
export function renderGrants(grants) {
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
        grants.map((g) =>
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
            h('td', {}, g.decided_by ?? '–'),
          ),
        ),
      ),
    ),
  ];
}
