import type { TaskSpec } from '../contracts/task-spec.js';
import { escapeText, escapeField as f } from './output.js';

/**
 * `gpu-broker review show` for a person (issue 11, item 9): the revision a reviewer judges, as text —
 * what runs (argv, env, image, network), on how many cards, for how long, what comes back, the
 * findings, what changed since the previous revision, earlier reviews, and the command to decide.
 * `--json` keeps the get_revision document. Everything the submitter wrote is escaped for the terminal
 * (issue 10, row 8): one-line values with escapeField (`f`), so a title cannot fake a line of this
 * page; multi-line texts with escapeText, then indented.
 */

/** The parts of get_revision's result this prints. */
export interface RevisionDocument {
  proposal_id: string;
  proposal_state: string;
  owner: string;
  revision: {
    revision_id: string;
    number: number;
    digest: string;
    spec: TaskSpec;
    sandbox: { runtime: string; image: string | null; network: string };
    findings: Array<{ severity: string; code: string; path: string; message: string }>;
    current: boolean;
  };
  previous: { revision_id: string; number: number } | null;
  diff: Array<{ path: string; before?: unknown; after?: unknown }>;
  reviews: Array<{ reviewer: string; decision: string; comments: string; revision_id: string }>;
}

const show = (v: unknown): string => (v === undefined ? '(none)' : f(JSON.stringify(v)));

/** Indents every line of a multi-line text. */
const indent = (text: string): string => escapeText(text).replace(/^/gm, '    ');

/** The text `review show` prints. */
export function formatRevision(d: RevisionDocument): string {
  const r = d.revision;
  const s = r.spec;
  const cards = s.cards as { count: number; model?: string | undefined; per_node?: number | undefined };
  const env = Object.entries(s.runtime.env ?? {});
  const lines = [
    `${f(d.proposal_id)} (${d.proposal_state}) by ${f(d.owner)}: revision ${r.number}${r.current ? '' : ' (not current)'}`,
    `  revision:  ${f(r.revision_id)}`,
    `  digest:    ${r.digest}`,
    `  title:     ${f(s.title)}`,
    '  objective:',
    indent(s.objective),
    '  success criteria:',
    indent(s.success_criteria),
    `  runs:      ${r.sandbox.runtime}${r.sandbox.image ? ` ${f(r.sandbox.image)}` : ''}: ${f(s.runtime.argv.map((a) => JSON.stringify(a)).join(' '))}`,
    `  env:       ${env.length === 0 ? '(none)' : f(env.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' '))}`,
    `  cards:     ${cards.count}${cards.per_node ? ` across ${cards.count / cards.per_node} nodes, ${cards.per_node} per node (Slurm)` : ''}${cards.model ? ` (${f(cards.model)})` : ''}${s.worker ? ` on ${f(s.worker)}` : ''}`,
    `  network:   ${r.sandbox.network}`,
    `  time:      at most ${s.time_limit_seconds} s`,
    `  outputs:   ${s.outputs.length === 0 ? '(none)' : s.outputs.map((o) => `${f(o.path)}${o.required ? '' : ' (optional)'}`).join(', ')}`,
    ...(s.notes ? ['  notes:', indent(s.notes)] : []),
    r.findings.length === 0
      ? '  findings:  none'
      : `  findings:\n${r.findings.map((x) => `    ${x.severity.toUpperCase()} ${x.code} at ${f(x.path)}: ${f(x.message)}`).join('\n')}`,
    ...(d.previous === null
      ? []
      : [
          `  changed since revision ${d.previous.number}:`,
          ...(d.diff.length === 0
            ? ['    nothing']
            : d.diff.map((c) => `    ${f(c.path)}: ${show(c.before)} → ${show(c.after)}`)),
        ]),
    ...(d.reviews.length === 0
      ? []
      : ['  reviews:', ...d.reviews.map((v) => `    ${f(v.reviewer)}: ${v.decision} — ${f(v.comments)}`)]),
  ];
  if (d.proposal_state === 'IN_REVIEW' && r.current)
    lines.push(
      '',
      'Decide (you may not review your own proposal):',
      `  npx gpu-broker review approve ${d.proposal_id} --revision ${r.revision_id} --comment "why"`,
      `  npx gpu-broker review request-changes ${d.proposal_id} --revision ${r.revision_id} --comment "what to change"`,
      `  npx gpu-broker review reject ${d.proposal_id} --revision ${r.revision_id} --comment "why not"`,
    );
  return lines.join('\n');
}
