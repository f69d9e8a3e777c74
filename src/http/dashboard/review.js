import { apiGet } from './api.js';
import { absent, fill, h, orDash } from './dom.js';
import { short } from './render.js';
import { visible } from './visible.js';

/**
 * The revision a reviewer judges, where Approve is offered (issue 20, items 5 and 6): what runs (argv and
 * env in their own block), the findings, the changes against the diff base (the latest earlier revision
 * a reviewer decided on, named, with the undecided revisions in between), every file diff paged to its
 * end, and every input's content paged (binary files named as such, never rendered). Characters that
 * display other than they are show as `⟨U+NNNN⟩` markers (visible.js), everywhere submitter text appears.
 */

/** Lines of a file diff loaded per "more" click. */
const DIFF_PAGE_LINES = 500;
/** Bytes of an input's content loaded per "more" click. */
const CONTENT_PAGE_BYTES = 64 * 1024;

/** A spec value in the diff: JSON, or "(absent)" for a path one side does not have. */
const json = (v) => (absent(v) ? '(absent)' : JSON.stringify(v));

/** The task's resource limits in one line (src/domain/policy/task-limits.ts describeLimits). */
function limitsText(l) {
  const d = orDash;
  return `memory ${d(l.memory_mib)} MiB, pids ${d(l.pids)}, cpu weight ${d(l.cpu_weight)}, /tmp ${d(l.tmp_mib)} MiB, /dev/shm ${d(l.shm_mib)} MiB, task dir ${d(l.disk_mib)} MiB`;
}

/** What runs: the sandbox, argv and the environment, each in its own block. */
function renderRuns(revision) {
  const { sandbox, spec } = revision;
  const env = Object.entries(spec.runtime.env ?? {});
  return h(
    'div',
    { class: 'runs' },
    sandbox
      ? h(
          'div',
          { class: 'sandbox small', dataset: { network: sandbox.network, runtime: sandbox.runtime } },
          `Runs as a ${sandbox.runtime}`,
          sandbox.image ? [' from image ', h('code', {}, visible(sandbox.image))] : null,
          ' · network: ',
          sandbox.network === 'host'
            ? h('span', { class: 'badge warn' }, 'host network')
            : h('span', {}, 'none (loopback only)'),
          sandbox.limits ? [' · limits: ', h('span', { class: 'limits' }, limitsText(sandbox.limits))] : null,
        )
      : null,
    h(
      'div',
      { class: 'argv' },
      h('span', { class: 'small' }, 'Command: '),
      spec.runtime.argv.map((a) => h('code', { class: 'arg' }, visible(a))),
    ),
    h(
      'div',
      { class: 'env-block' },
      h('div', { class: 'small' }, env.length ? `Environment (${env.length}):` : 'Environment: none set'),
      env.length
        ? h(
            'table',
            { class: 'env' },
            h(
              'tbody',
              {},
              env.map(([k, v]) =>
                h(
                  'tr',
                  { dataset: { env: k } },
                  h('td', {}, h('code', {}, visible(k))),
                  h('td', {}, h('code', {}, visible(v))),
                ),
              ),
            ),
          )
        : null,
    ),
  );
}

const KIND_WORDS = { person: 'person', agent_reviewer: 'agent reviewer', grant: 'standing grant' };

/** One revision no person read: its number and the agent's or grant's decision on it, if any. */
function notReadWords(r) {
  if (r.decision && r.kind)
    return `revision ${r.number} (${r.decision.replaceAll('_', ' ').toLowerCase()} by ${r.decided_by}, ${KIND_WORDS[r.kind] ?? r.kind})`;
  return `revision ${r.number}${r.confirmed ? '' : ' (never confirmed)'}`;
}

/**
 * Where the changes start: the last revision a PERSON decided on (who, and that it was a person), or
 * nothing; and the revisions in between that no person read — undecided, or decided only by an agent
 * reviewer or a standing grant (issue 35 item 3).
 */
function renderBase(rev) {
  const base = rev.diff_base;
  const between = rev.unreviewed_between ?? [];
  return h(
    'div',
    { class: 'diff-base small', dataset: { base: base ? String(base.number) : 'none' } },
    base
      ? `Changes since revision ${base.number}, the last one a person decided on (${base.decision.replaceAll('_', ' ').toLowerCase()} by ${base.decided_by ?? '?'}, ${KIND_WORDS[base.kind] ?? 'person'}).`
      : 'No earlier revision was decided on by a person: everything below is new to review (every file added).',
    between.length
      ? h(
          'div',
          { class: 'warn-text', dataset: { unreviewed: between.map((r) => r.number).join(',') } },
          `No person read these, included in these changes: ${between.map(notReadWords).join(', ')}.`,
        )
      : null,
  );
}

function diffLine(line) {
  const op = line.startsWith('@@') ? 'hunk' : line[0] === '+' ? 'add' : line[0] === '-' ? 'del' : 'ctx';
  return h('div', { dataset: { op } }, visible(line));
}

/** One file's text diff, with a "more" button that loads the next lines until its end. */
function renderTextDiff(rev, change) {
  const pre = h('pre', { class: 'unified' });
  const footer = h('div', { class: 'diff-footer small' });
  let shown = 0;
  const add = (page) => {
    const lines = page.unified === '' ? [] : page.unified.split('\n');
    pre.append(...lines.map(diffLine));
    shown += lines.length;
    fill(footer);
    if (shown < page.total_lines) {
      footer.append(
        h('span', { class: 'muted' }, `${shown} of ${page.total_lines} lines `),
        h(
          'button',
          {
            class: 'button more',
            type: 'button',
            onclick: async (e) => {
              e.currentTarget.disabled = true;
              const q = new URLSearchParams({
                diff_path: change.path,
                diff_offset: String(shown),
                diff_lines: String(DIFF_PAGE_LINES),
              });
              try {
                const next = await apiGet(
                  `/api/v1/proposals/${encodeURIComponent(rev.proposal_id)}/revisions/${encodeURIComponent(rev.revision.revision_id)}?${q}`,
                );
                const again = next.input_changes.find((c) => c.path === change.path);
                if (again?.text_diff) add(again.text_diff);
              } catch (err) {
                footer.append(h('span', { class: 'bad-text' }, ` ${err.message}`));
              }
            },
          },
          'Show more lines',
        ),
      );
    } else footer.append(h('span', { class: 'muted', dataset: { complete: '' } }, `${shown} lines, the end`));
  };
  add(change.text_diff);
  return [pre, footer];
}

/** The spec diff and the file changes against the diff base. */
function renderChanges(rev) {
  const changes = rev.input_changes ?? [];
  return h(
    'div',
    { class: 'diff' },
    renderBase(rev),
    rev.diff.length
      ? rev.diff.map((d) =>
          h(
            'div',
            { class: 'diff-line', dataset: { specPath: d.path } },
            h('code', {}, visible(d.path)),
            ' ',
            visible(`${json(d.before)} → ${json(d.after)}`),
          ),
        )
      : h('div', { class: 'muted small' }, 'Spec: no changes.'),
    changes.map((c) =>
      h(
        'div',
        { class: 'input-change', dataset: { path: c.path, change: c.change } },
        h(
          'div',
          { class: 'small' },
          h('code', {}, visible(c.path)),
          ` ${c.change}`,
          c.note ? ` (${c.note})` : null,
        ),
        c.text_diff ? renderTextDiff(rev, c) : null,
      ),
    ),
  );
}

/** One input's content, paged through get_input; binary content is named, never rendered. */
function renderContent(rev, input) {
  const body = h('div', { class: 'content' }, h('p', { class: 'muted small' }, 'Loading…'));
  let loaded = false;
  const pre = h('pre', { class: 'file-content', dataset: { content: input.path } });
  const footer = h('div', { class: 'content-footer small' });
  const load = async (offset) => {
    const q = new URLSearchParams({
      path: input.path,
      offset: String(offset),
      max_bytes: String(CONTENT_PAGE_BYTES),
    });
    const page = await apiGet(
      `/api/v1/proposals/${encodeURIComponent(rev.proposal_id)}/revisions/${encodeURIComponent(rev.revision.revision_id)}/input?${q}`,
    );
    if (page.encoding !== 'utf8') {
      fill(
        body,
        h(
          'p',
          { class: 'binary small', dataset: { binary: input.path } },
          `binary, ${page.size} bytes, sha256 ${page.sha256}`,
        ),
      );
      return;
    }
    if (offset === 0) fill(body, pre, footer);
    pre.append(...visible(page.content, { lines: true }));
    fill(
      footer,
      ...(page.complete
        ? [h('span', { class: 'muted', dataset: { complete: '' } }, `${page.size} bytes, the end`)]
        : [
            h('span', { class: 'muted' }, `${page.next_offset} of ${page.size} bytes `),
            h(
              'button',
              {
                class: 'button more',
                type: 'button',
                onclick: (e) => {
                  e.currentTarget.disabled = true;
                  load(page.next_offset).catch((err) => footer.append(` ${err.message}`));
                },
              },
              'Show more',
            ),
          ]),
    );
  };
  return h(
    'details',
    {
      class: 'input-content',
      dataset: { inputContent: input.path },
      ontoggle: (e) => {
        if (!e.target.open || loaded) return;
        loaded = true;
        load(0).catch((err) => fill(body, h('p', { class: 'bad-text small' }, err.message)));
      },
    },
    h('summary', { class: 'small' }, 'Content'),
    body,
  );
}

/** The input manifest: every file the task sees read-only, with its content one click away. */
function renderInputs(rev, inputs) {
  return h(
    'div',
    { class: 'inputs' },
    h(
      'div',
      { class: 'small' },
      `Inputs (${inputs.length} file${inputs.length === 1 ? '' : 's'}, read-only in /task):`,
    ),
    inputs.map((i) =>
      h(
        'div',
        { class: 'input', dataset: { input: i.path } },
        h(
          'div',
          { class: 'small' },
          h('code', {}, visible(i.path)),
          ` · ${i.size} B · sha256 `,
          short(i.sha256, 16),
          i.executable ? ' · executable' : null,
        ),
        renderContent(rev, i),
      ),
    ),
  );
}

/** A revision under review: what runs, findings, changes against the diff base, inputs, the spec. */
export function renderRevision(rev) {
  const { revision } = rev;
  const inputs = rev.inputs ?? [];
  return [
    renderRuns(revision),
    revision.findings.length
      ? h(
          'ul',
          { class: 'findings' },
          revision.findings.map((f) =>
            h(
              'li',
              { dataset: { severity: f.severity } },
              h('code', {}, f.code),
              ' ',
              visible(`${f.path}: ${f.message}`),
              f.hint ? h('div', { class: 'muted small' }, visible(f.hint)) : null,
            ),
          ),
        )
      : h('p', { class: 'muted small' }, 'No policy findings.'),
    renderChanges(rev),
    inputs.length ? renderInputs(rev, inputs) : null,
    h('pre', { class: 'spec' }, visible(JSON.stringify(revision.spec, null, 2), { lines: true })),
  ];
}
