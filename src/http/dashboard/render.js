import { absent, h, orDash } from './dom.js';
import { visible } from './visible.js';

/**
 * Views of the dashboard: functions from API results to DOM nodes. Text always goes in as text nodes
 * (never as HTML), so nothing a task title or a log line contains can run in the page; submitter text
 * (titles, log lines) goes through visible(), so nothing in it hides or reorders what is shown.
 */

/** A state pill coloured by `data-state`. */
export function pill(state, label = state) {
  return h('span', { class: 'pill', dataset: { state } }, label.replaceAll('_', ' ').toLowerCase());
}

/** The "SIM" badge every simulated card and worker carries. */
export function simBadge() {
  return h('span', { class: 'badge sim', title: 'Simulated card: no real GPU behind it' }, 'SIM');
}

/** A local time, or a dash. */
export function time(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : '–';
}

/** A duration between two ISO times, e.g. "1.4 s" or "3 min". */
export function duration(fromIso, toIso) {
  if (!fromIso || !toIso) return '–';
  const s = (Date.parse(toIso) - Date.parse(fromIso)) / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

/** A shortened id or digest with the full value as a tooltip. */
export function short(value, keep = 12) {
  if (!value) return '–';
  return h('code', { title: value }, value.length > keep ? `${value.slice(0, keep)}…` : value);
}

/** A muted line for empty views. */
export function empty(text) {
  return h('p', { class: 'muted empty' }, text);
}

/** An API error as the master worded it: code, message and hint. */
export function errorBox(err) {
  return h(
    'div',
    { class: 'error-box', role: 'alert', dataset: { code: err.code ?? 'ERROR' } },
    h('strong', {}, err.code ?? 'ERROR'),
    ' ',
    err.message ?? String(err),
    err.hint ? h('div', { class: 'hint' }, err.hint) : null,
  );
}

/** Alerts from get_status (quarantined cards, sampler errors, offline workers, reconciliation). */
export function renderAlerts(alerts) {
  return alerts.map((a) =>
    h(
      'div',
      { class: 'alert', dataset: { severity: a.severity, kind: a.kind } },
      h('span', { class: 'alert-kind' }, a.kind.replaceAll('_', ' ')),
      h('span', { class: 'alert-message' }, a.message),
      h('span', { class: 'alert-action' }, a.action),
    ),
  );
}

/** Task counts by state, as small chips. */
export function renderCounts(byState) {
  const order = ['QUEUED', 'ASSIGNED', 'RUNNING', 'FINALIZING', 'COMPLETED', 'FAILED', 'CANCELLED'];
  const states = [...order, 'RECONCILIATION_REQUIRED'].filter((s) => (byState[s] ?? 0) > 0);
  return states.map((s) => h('span', { class: 'count', dataset: { state: s } }, pill(s), ` ${byState[s]}`));
}

function mib(n) {
  return n === null || n === undefined ? '?' : `${(n / 1024).toFixed(1)}`;
}

/** One card tile: state colour, VRAM bar, utilisation, temperature, and the task holding it. */
function renderCard(c) {
  const pct =
    !absent(c.memory_used_mib) && c.memory_total_mib
      ? Math.min(100, (100 * c.memory_used_mib) / c.memory_total_mib)
      : 0;
  return h(
    'div',
    { class: 'card', dataset: { card: `${c.worker_id}/${c.index}`, state: c.state } },
    h(
      'div',
      { class: 'card-head' },
      h('span', { class: 'card-index' }, `#${c.label ?? c.index}`),
      h(
        'span',
        { class: 'card-model', title: c.mig ? `${c.uuid} on ${c.mig.parent_uuid}` : c.uuid },
        c.mig
          ? `MIG ${c.mig.profile}`
          : c.mig_mode === 'enabled'
            ? `${orDash(c.model)} · MIG mode`
            : orDash(c.model),
      ),
      c.simulated ? simBadge() : null,
    ),
    h('div', { class: 'card-state' }, pill(c.state)),
    h(
      'div',
      { class: 'vram', title: `${c.memory_used_mib ?? '?'} / ${c.memory_total_mib ?? '?'} MiB` },
      h('div', { class: 'vram-bar' }, h('div', { class: 'vram-fill', style: { width: `${pct}%` } })),
      h('span', { class: 'vram-text' }, `${mib(c.memory_used_mib)} / ${mib(c.memory_total_mib)} GiB`),
    ),
    h(
      'div',
      { class: 'card-stats' },
      // nvidia-smi has no utilisation per MIG instance, and [N/A] for a card in MIG mode.
      absent(c.utilization_pct) && (c.mig || c.mig_mode === 'enabled')
        ? h('span', { title: 'nvidia-smi reports no utilisation per MIG instance' }, 'util n/a')
        : h('span', {}, `util ${c.utilization_pct ?? '–'}%`),
      h('span', {}, `${c.temperature_c ?? '–'} °C`),
      absent(c.power_w) ? null : h('span', {}, `${Math.round(c.power_w)} W`),
    ),
    !absent(c.lease_epoch)
      ? h(
          'div',
          { class: 'card-lease' },
          c.task_id ? short(c.task_id, 14) : h('span', { class: 'muted' }, 'another owner'),
          h('span', { class: 'epoch', title: 'lease epoch' }, `epoch ${c.lease_epoch}`),
        )
      : null,
    c.slurm
      ? h(
          'div',
          { class: 'card-slurm muted small', title: 'Slurm job (this card is a pool slot)' },
          slurmText(c.slurm),
        )
      : null,
    c.state !== 'AVAILABLE' && c.state !== 'LEASED' && c.reasons.length
      ? h(
          'div',
          { class: 'card-reasons', title: c.reasons.join('; ') },
          c.cordon_reason ?? c.reasons.join('; '),
        )
      : null,
  );
}

/** A Slurm job: its id and binding (`job 12 · localhost[0,1]`), or its state and Slurm's pending reason. */
function slurmText(job) {
  if (job.binding)
    return `job ${job.job_id} · ${job.binding.nodes.map((n) => `${n.node}[${n.gpus.join(',')}]`).join(' ')}`;
  return `job ${job.job_id} · ${job.state}${job.pending_reason ? ` (${job.pending_reason})` : ''}`;
}

/** Workers with their cards; cards of workers not listed (none expected) are grouped under their id. */
export function renderWorkers(workers, cards) {
  if (workers.length === 0)
    return [empty('No workers have enrolled yet. Start one with `gpu-broker worker`.')];
  return workers.map((w) => {
    // A MIG slice right after its card (docs/decisions/0046-mig-slices-as-cards.md).
    const at = (c) => (c.mig ? c.mig.parent_index : c.index);
    const own = cards
      .filter((c) => c.worker_id === w.worker_id)
      .sort((a, b) => at(a) - at(b) || (a.mig ? 1 : 0) - (b.mig ? 1 : 0) || a.index - b.index);
    return h(
      'div',
      { class: 'worker', dataset: { worker: w.worker_id, online: String(w.online) } },
      h(
        'div',
        { class: 'worker-head' },
        h('span', { class: 'worker-dot', title: w.online ? 'online' : 'offline' }),
        h('strong', {}, w.worker_id),
        h(
          'span',
          { class: 'muted' },
          `${orDash(w.hostname)} · ${orDash(w.provider)} · v${orDash(w.version)}`,
        ),
        w.simulated ? simBadge() : null,
        w.draining ? h('span', { class: 'badge warn' }, 'draining') : null,
        w.online ? null : h('span', { class: 'badge bad' }, `offline since ${time(w.offline_since)}`),
        w.sampler_error ? h('span', { class: 'badge bad', title: w.sampler_error }, 'sampler error') : null,
        w.backend === 'slurm' && w.slurm
          ? h(
              'span',
              {
                class: 'badge slurm',
                title: "Slurm worker: its cards are the partition's GPU pool; Slurm places the jobs",
              },
              `slurm ${w.slurm.partition} · ${w.slurm.nodes.length} node${w.slurm.nodes.length === 1 ? '' : 's'}`,
            )
          : null,
        w.unisolated
          ? h(
              'span',
              {
                class: 'badge bad unisolated',
                title: 'Runs tasks without a sandbox (--isolation none): tasks see the whole host',
              },
              'UNISOLATED',
            )
          : null,
        w.unisolated ? null : renderSeccomp(w.seccomp),
      ),
      h('div', { class: 'cards' }, own.length ? own.map(renderCard) : empty('No cards reported.')),
    );
  });
}

/** A sandboxed worker's syscall filter: its version, and any group its operator allowed again. */
function renderSeccomp(s) {
  if (!s)
    return h(
      'span',
      { class: 'badge warn seccomp', title: 'Its process tasks run without a syscall filter' },
      'no syscall filter',
    );
  const widened = s.allowed.length > 0;
  return h(
    'span',
    {
      class: `badge seccomp${widened ? ' warn' : ''}`,
      title: widened
        ? `Syscall filter ${s.version}; allowed again by its operator: ${s.allowed.join(', ')}`
        : `Every process task runs under the syscall filter ${s.version}`,
    },
    widened ? `seccomp ${s.version} (allowed: ${s.allowed.join(', ')})` : `seccomp ${s.version}`,
  );
}

/** A wait reason: its code and the message written for people and agents. */
function renderReason(reason) {
  if (!reason) return h('span', { class: 'muted' }, '–');
  return h(
    'div',
    { class: 'reason' },
    h('code', {}, reason.code ?? 'waiting'),
    reason.message ? h('div', { class: 'muted small' }, reason.message) : null,
  );
}

/** The queue in scheduling order. */
export function renderQueue(tasks) {
  if (tasks.length === 0) return [empty('The queue is empty.')];
  return [
    h(
      'table',
      { class: 'table' },
      h(
        'thead',
        {},
        h('tr', {}, h('th', {}, '#'), h('th', {}, 'Task'), h('th', {}, 'Cards'), h('th', {}, 'Reason')),
      ),
      h(
        'tbody',
        {},
        tasks.map((t) =>
          h(
            'tr',
            { dataset: { queued: t.task_id ?? 'other' } },
            h('td', { class: 'num' }, t.position ?? '–'),
            h(
              'td',
              {},
              t.title ? visible(t.title) : h('span', { class: 'muted' }, 'another owner’s task'),
              h(
                'div',
                { class: 'muted small' },
                t.task_id ?? '',
                t.priority ? ` · priority ${t.priority}` : '',
              ),
            ),
            h('td', { class: 'num' }, orDash(t.cards)),
            h('td', {}, renderReason(t.reason)),
          ),
        ),
      ),
    ),
  ];
}

/** Recent tasks; `onSelect(task_id)` opens one. */
export function renderTasks(tasks, selected, onSelect) {
  if (tasks.length === 0) return [empty('No tasks yet.')];
  return [
    h(
      'table',
      { class: 'table clickable' },
      h(
        'thead',
        {},
        h('tr', {}, h('th', {}, 'Task'), h('th', {}, 'Owner'), h('th', {}, 'State'), h('th', {}, 'Updated')),
      ),
      h(
        'tbody',
        {},
        tasks.map((t) =>
          h(
            'tr',
            {
              dataset: { task: t.task_id, state: t.state },
              class: t.task_id === selected ? 'selected' : null,
              tabindex: 0,
              onclick: () => onSelect(t.task_id),
              onkeydown: (e) => {
                if (e.key === 'Enter') onSelect(t.task_id);
              },
            },
            h('td', {}, visible(t.title), h('div', { class: 'muted small' }, t.task_id)),
            h('td', {}, orDash(t.owner)),
            h(
              'td',
              {},
              pill(t.state),
              t.failure_reason ? h('div', { class: 'small bad-text' }, t.failure_reason) : null,
            ),
            h('td', { class: 'muted' }, time(t.updated_at)),
          ),
        ),
      ),
    ),
  ];
}

/** One task with its placement and both log streams. */
export function renderTaskDetail(task, logs) {
  const field = (label, value) => [h('dt', {}, label), h('dd', {}, value)];
  const cards = task.cards.length ? task.cards.map((c) => `#${c.index}`).join(', ') : '–';
  return [
    h(
      'div',
      { class: 'detail-title', dataset: { detail: task.task_id } },
      h('strong', {}, visible(task.title)),
      pill(task.state),
    ),
    h(
      'dl',
      { class: 'fields' },
      field('Task', h('code', {}, task.task_id)),
      field('Owner', orDash(task.owner)),
      field('Worker', task.worker_id ?? '–'),
      field('Cards', [cards, task.simulated ? simBadge() : null]),
      field('Lease epoch', task.lease_epoch ?? '–'),
      field('Approved', time(task.approved_at)),
      field('Started', `${time(task.started_at)} (admission ${duration(task.approved_at, task.started_at)})`),
      field('Finished', time(task.finished_at)),
      field('Exit', task.exit_code ?? task.signal ?? '–'),
      task.failure_reason ? field('Failure', h('span', { class: 'bad-text' }, task.failure_reason)) : [],
      task.reason ? field('Reason', renderReason(task.reason)) : [],
    ),
    ...['stdout', 'stderr'].map((stream) => {
      const log = logs[stream];
      return h(
        'div',
        { class: 'log' },
        h(
          'div',
          { class: 'log-head' },
          stream,
          log ? h('span', { class: 'muted' }, `${log.total_bytes} bytes`) : null,
        ),
        h(
          'pre',
          { class: 'log-body', dataset: { stream } },
          log ? visible(log.data || '(empty)', { lines: true }) : '(not available)',
        ),
      );
    }),
  ];
}

/** Qualification runs with verdict and evidence digest. */
export function renderQualifications(runs) {
  if (runs.length === 0)
    return [empty('No qualification runs to show. Start one with `gpu-broker qualify`.')];
  return [
    h(
      'table',
      { class: 'table' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', {}, 'Run'),
          h('th', {}, 'Worker'),
          h('th', {}, 'Card ladder'),
          h('th', {}, 'Verdict'),
          h('th', {}, 'Evidence digest'),
        ),
      ),
      h(
        'tbody',
        {},
        runs.map((r) =>
          h(
            'tr',
            { dataset: { run: r.run_id } },
            h(
              'td',
              {},
              short(r.run_id, 16),
              h('div', { class: 'muted small' }, time(r.finished_at ?? r.created_at)),
            ),
            h('td', {}, r.worker_id ?? '–'),
            h('td', {}, (r.ladder ?? r.requested ?? []).join(', ') || '–'),
            h(
              'td',
              {},
              pill(r.verdict ?? r.state),
              r.detail ? h('div', { class: 'muted small' }, r.detail) : null,
            ),
            h('td', {}, short(r.digest, 16)),
          ),
        ),
      ),
    ),
  ];
}
