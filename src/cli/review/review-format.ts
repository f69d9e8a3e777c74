import type { ResolvedLimits } from '../../contracts/task-limits.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import { describeLimits } from '../../domain/policy/task-limits.js';
import { escapeText, escapeField as f } from '../common/output.js';

/**
 * `gpu-broker review show` for a person (docs/operations.md): the revision a reviewer judges, as text —
 * what runs (argv, env, image, network), on how many cards, for how long, what comes back, the
 * findings, the input manifest, every change (spec and files, text diffs whole) since the diff base —
 * the last revision a person decided on, or nothing — earlier reviews, and the command to decide.
 * `--json` keeps the get_revision document. Everything the submitter wrote is escaped for the terminal
 * (docs/security.md "Terminal escapes"): one-line values with escapeField (`f`), so a title cannot fake a line of this
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
    sandbox: { runtime: string; image: string | null; network: string; limits?: ResolvedLimits };
    findings: Array<{ severity: string; code: string; path: string; message: string }>;
    current: boolean;
  };
  diff_base?: {
    revision_id: string;
    number: number;
    decision: string;
    kind?: string;
    decided_by?: string;
  } | null;
  unreviewed_between?: Array<{
    revision_id: string;
    number: number;
    confirmed: boolean;
    decision?: string | null;
    kind?: string | null;
    decided_by?: string | null;
  }>;
  previous: { revision_id: string; number: number } | null;
  diff: Array<{ path: string; before?: unknown; after?: unknown }>;
  inputs?: Array<{ path: string; sha256: string; size: number; executable?: boolean }>;
  input_changes?: Array<{
    path: string;
    change: string;
    before?: { sha256: string; size: number; executable?: boolean };
    after?: { sha256: string; size: number; executable?: boolean };
    text_diff?: { unified: string; total_lines: number; truncated: boolean };
    note?: string;
  }>;
  reviews: Array<{ reviewer: string; decision: string; comments: string; revision_id: string }>;
}

/** The words for a decision's kind. */
const KIND_WORDS: Record<string, string> = {
  person: 'person',
  agent_reviewer: 'agent reviewer',
  grant: 'standing grant',
};

/** One revision no person read, e.g. "revision 2 (REQUEST_CHANGES by claude, agent reviewer)". */
function notReadLine(r: NonNullable<RevisionDocument['unreviewed_between']>[number]): string {
  if (r.decision && r.kind)
    return `revision ${r.number} (${r.decision} by ${f(r.decided_by ?? '?')}, ${KIND_WORDS[r.kind] ?? f(r.kind)})`;
  return `revision ${r.number}${r.confirmed ? '' : ' (never confirmed)'}`;
}

/** Where the changes start, who decided it, and the revisions they include that no person read. */
function baseLines(d: RevisionDocument): string[] {
  const base = d.diff_base ?? null;
  const between = d.unreviewed_between ?? [];
  const by = base?.decided_by === undefined ? '' : `, decided by ${f(base.decided_by)} (person)`;
  return [
    base
      ? `  changes since revision ${base.number} (${base.decision}${by}), the last one a person decided on:`
      : '  changes: no earlier revision was decided on by a person; everything is new (every file added):',
    ...(between.length === 0
      ? []
      : [`    no person read these, included here: ${between.map(notReadLine).join(', ')}`]),
  ];
}

/** The file changes, each text diff whole, indented. */
function fileChangeLines(d: RevisionDocument): string[] {
  const out: string[] = [];
  for (const c of d.input_changes ?? []) {
    const blob = c.after ?? c.before;
    const mode = blob?.executable === true ? ', executable' : '';
    out.push(
      `    ${c.change} ${f(c.path)}${blob ? ` (${blob.size} B, sha256 ${blob.sha256}${mode})` : ''}${c.note ? ` — ${c.note}` : ''}`,
    );
    if (c.text_diff) {
      if (c.text_diff.unified !== '')
        out.push(...c.text_diff.unified.split('\n').map((l) => `      ${f(l)}`));
      if (c.text_diff.truncated) out.push(`      … ${c.text_diff.total_lines} lines in all`);
    }
  }
  return out;
}

/** The input manifest: size, sha256 and path of every file the task sees. */
function manifestLines(d: RevisionDocument): string[] {
  const inputs = d.inputs ?? [];
  if (inputs.length === 0) return ['  inputs:    (none)'];
  return [
    `  inputs (${inputs.length} file${inputs.length === 1 ? '' : 's'}, read-only in /task; read one: gpu-broker review input ${d.proposal_id} --revision ${d.revision.revision_id} --path PATH):`,
    ...inputs.map(
      (i) =>
        `    ${String(i.size).padStart(9)} B  ${i.sha256}  ${f(i.path)}${i.executable ? ' (executable)' : ''}`,
    ),
  ];
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
    ...(env.length === 0
      ? ['  env:       (none)']
      : [
          `  env (${env.length}, the task's process sees each):`,
          ...env.map(([k, v]) => `    ${f(k)}=${f(JSON.stringify(v))}`),
        ]),
    `  cards:     ${cards.count}${cards.per_node ? ` across ${cards.count / cards.per_node} nodes, ${cards.per_node} per node (Slurm)` : ''}${cards.model ? ` (${f(cards.model)})` : ''}${s.worker ? ` on ${f(s.worker)}` : ''}`,
    `  network:   ${r.sandbox.network}`,
    ...(r.sandbox.limits ? [`  limits:    ${describeLimits(r.sandbox.limits)}`] : []),
    `  time:      at most ${s.time_limit_seconds} s`,
    `  outputs:   ${s.outputs.length === 0 ? '(none)' : s.outputs.map((o) => `${f(o.path)}${o.required ? '' : ' (optional)'}`).join(', ')}`,
    ...(s.notes ? ['  notes:', indent(s.notes)] : []),
    r.findings.length === 0
      ? '  findings:  none'
      : `  findings:\n${r.findings.map((x) => `    ${x.severity.toUpperCase()} ${x.code} at ${f(x.path)}: ${f(x.message)}`).join('\n')}`,
    ...manifestLines(d),
    ...baseLines(d),
    ...(d.diff.length === 0
      ? ['    spec: nothing changed']
      : ['    spec:', ...d.diff.map((c) => `      ${f(c.path)}: ${show(c.before)} → ${show(c.after)}`)]),
    ...((d.input_changes ?? []).length === 0
      ? ['    files: nothing changed']
      : ['    files:', ...fileChangeLines(d)]),
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
