import { h } from './dom.js';

/**
 * GPU usage per account over the last days (get_usage with `interval: "day"`): one column per day, its
 * accounts stacked, heights in card-hours against the busiest day; a legend with each account's total.
 * Simulated cards count beside real ones and the legend says which. Text only through h().
 */

const COLOURS = ['#2563eb', '#16a34a', '#d97706', '#a21caf', '#0891b2', '#dc2626', '#4d7c0f', '#6b7280'];

function hours(seconds) {
  return seconds / 3600;
}

/** The chart and legend for `usage` (the answer of GET /api/v1/usage?interval=day&by=account). */
export function renderUsage(usage) {
  const series = usage.series ?? [];
  const totals = new Map();
  for (const l of usage.lines) totals.set(l.key, (totals.get(l.key) ?? 0) + l.card_seconds);
  const accounts = [...totals.keys()].sort();
  if (accounts.length === 0)
    return [
      h('p', { class: 'muted' }, 'No usage yet: a lease is charged to its account when it is released.'),
    ];
  const colour = new Map(accounts.map((a, i) => [a, COLOURS[i % COLOURS.length]]));
  const dayTotal = (s) => s.lines.reduce((n, l) => n + l.card_seconds, 0);
  const peak = Math.max(1, ...series.map(dayTotal));
  const simulated = usage.lines.some((l) => l.simulated);
  const columns = series.map((s) => {
    const byAccount = new Map();
    for (const l of s.lines) byAccount.set(l.key, (byAccount.get(l.key) ?? 0) + l.card_seconds);
    const day = s.start.slice(5, 10);
    return h(
      'div',
      {
        class: 'usage-day',
        dataset: { day: s.start.slice(0, 10) },
        title: `${s.start.slice(0, 10)}: ${hours(dayTotal(s)).toFixed(2)} card-hours`,
      },
      h(
        'div',
        { class: 'usage-stack' },
        accounts
          .filter((a) => byAccount.has(a))
          .map((a) =>
            h('div', {
              class: 'usage-bar',
              dataset: { account: a },
              style: { height: `${(100 * byAccount.get(a)) / peak}%`, background: colour.get(a) },
              title: `${a}: ${hours(byAccount.get(a)).toFixed(2)} card-hours`,
            }),
          ),
      ),
      h('div', { class: 'usage-label' }, day),
    );
  });
  const legend = h(
    'ul',
    { class: 'usage-legend' },
    accounts.map((a) =>
      h(
        'li',
        { dataset: { account: a } },
        h('span', { class: 'usage-swatch', style: { background: colour.get(a) } }),
        `${a} ${hours(totals.get(a)).toFixed(2)} card-hours`,
      ),
    ),
  );
  return [
    h('div', { class: 'usage-chart', role: 'img', 'aria-label': 'card-hours per account and day' }, columns),
    legend,
    simulated ? h('p', { class: 'muted' }, 'Includes SIMULATED cards (not real GPUs).') : null,
  ];
}
