import { h, orDash } from './dom.js';
import { visible } from './visible.js';

/**
 * Where every account stands (get_status `accounts`, operators only; docs/operations.md "Accounts and
 * usage"): its share, the cards it holds against share and quota, its card-hours this period, budget
 * left, queued tasks and why the first waits, and a row per quota of a card model under its account —
 * the same as `gpu-broker status`'s ACCOUNTS table. Anyone else sees their own account's line
 * (`you.words`). Text only through h().
 */

function hours(n) {
  return `${n.toFixed(2)} h`;
}

/** The table (operators) or the caller's own line, from the answer of GET /api/v1/status. */
export function renderAccounts(status) {
  if (!status.accounts) {
    return status.you?.words ? [h('p', { class: 'account-you' }, visible(status.you.words))] : [];
  }
  const head = [
    'Account',
    'Share',
    'Cards',
    'Nominal / limit',
    'Used this period',
    'Budget left',
    'Queued',
    'First waits',
  ];
  return [
    h(
      'table',
      { class: 'table accounts' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          head.map((t) => h('th', {}, t)),
        ),
      ),
      h(
        'tbody',
        {},
        status.accounts.flatMap((a) => [
          h(
            'tr',
            { dataset: { account: a.account } },
            h(
              'td',
              {},
              visible(a.account),
              a.parent ? h('div', { class: 'muted small' }, 'in ', visible(a.parent)) : null,
            ),
            h(
              'td',
              { class: 'num', dataset: { col: 'share' } },
              `${(a.share * 100).toFixed(1)} % (${a.share_cards})`,
            ),
            h('td', { class: 'num', dataset: { col: 'held' } }, a.held_cards),
            h(
              'td',
              { class: 'num', dataset: { col: 'quota' } },
              `${orDash(a.nominal_cards)} / ${a.limit_cards ?? (a.nominal_cards === null ? '–' : 'any')}`,
            ),
            h(
              'td',
              { class: 'num', dataset: { col: 'used' } },
              hours(a.usage_card_hours),
              h('div', { class: 'muted small' }, a.period === '7d' ? 'last 7 days' : `this ${a.period}`),
            ),
            h(
              'td',
              { class: 'num', dataset: { col: 'budget' } },
              a.budget_left_card_hours === null
                ? '–'
                : `${hours(a.budget_left_card_hours)} of ${a.budget_card_hours}`,
            ),
            h('td', { class: 'num', dataset: { col: 'queued' } }, a.queued),
            h(
              'td',
              { dataset: { col: 'wait' } },
              a.first_wait
                ? [
                    h('code', {}, a.first_wait.code),
                    h('div', { class: 'muted small' }, visible(a.first_wait.message)),
                  ]
                : '',
            ),
          ),
          ...modelRows(a),
        ]),
      ),
    ),
  ];
}

/**
 * One row under an account per quota of a card model (ADR 0048): the cards of the model its subtree
 * holds against that quota, its card-hours of the model this period and budget left.
 */
function modelRows(a) {
  return (a.model_quotas ?? []).map((q) =>
    h(
      'tr',
      { class: 'model-quota', dataset: { modelOf: a.account, model: q.model } },
      h('td', { class: 'muted' }, '↳ ', visible(q.model)),
      h('td', {}, ''),
      h('td', { class: 'num', dataset: { col: 'held' } }, q.held_cards),
      h(
        'td',
        { class: 'num', dataset: { col: 'quota' } },
        `${orDash(q.nominal_cards)} / ${q.limit_cards ?? (q.nominal_cards === null ? '–' : 'any')}`,
      ),
      h(
        'td',
        { class: 'num', dataset: { col: 'used' } },
        hours(q.usage_card_hours),
        h('div', { class: 'muted small' }, q.period === '7d' ? 'last 7 days' : `this ${q.period}`),
      ),
      h(
        'td',
        { class: 'num', dataset: { col: 'budget' } },
        q.budget_left_card_hours === null
          ? '–'
          : `${hours(q.budget_left_card_hours)} of ${q.budget_card_hours}`,
      ),
      h('td', {}, ''),
      h('td', {}, ''),
    ),
  );
}
