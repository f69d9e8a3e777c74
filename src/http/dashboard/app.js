import { renderAccounts } from './accounts.js';
import { ApiError, apiGet, apiPost, clearToken, followEvents, getToken, setToken } from './api.js';
import { fill, h, orDash } from './dom.js';
import { renderGrants } from './grants.js';
import {
  empty,
  errorBox,
  renderAlerts,
  renderCounts,
  renderQualifications,
  renderQueue,
  renderTaskDetail,
  renderTasks,
  renderWorkers,
  short,
  time,
} from './render.js';
import { renderRevision } from './review.js';
import { renderUsage } from './usage.js';
import { visible, visibleText } from './visible.js';

/**
 * The dashboard: sign-in, then views that re-read the REST API when the event stream names a topic that
 * touches them. Each view refreshes at most once per burst (debounced) and never twice at once. Card
 * utilisation and temperature are not change events, so the cards view also refreshes every 15 s
 * while the tab is visible; nothing else polls.
 */

const $ = (id) => document.getElementById(id);
const DEBOUNCE_MS = 120;
const CARDS_REFRESH_MS = 15000;

const state = {
  selectedTask: null,
  /** Review comments typed so far, by proposal id (kept across re-renders). */
  drafts: new Map(),
  /** Qualification runs this page has heard of (when the master cannot list them). */
  runIds: new Set(),
  /** Whether the token may read qualification runs; null until asked. */
  operator: null,
  stopEvents: null,
  cardsTimer: null,
};

// ---- views: each reads what it shows and renders it ------------------------------------------------

async function refreshCards() {
  const [{ workers }, { cards }] = await Promise.all([apiGet('/api/v1/workers'), apiGet('/api/v1/cards')]);
  fill($('workers'), ...renderWorkers(workers, cards));
}

async function refreshStatus() {
  const status = await apiGet('/api/v1/status');
  fill($('alerts'), ...renderAlerts(status.alerts));
  fill($('task-counts'), ...renderCounts(status.tasks_by_state));
  fill($('accounts'), ...renderAccounts(status));
}

async function refreshQueue() {
  const { tasks } = await apiGet('/api/v1/queue');
  fill($('queue'), ...renderQueue(tasks));
}

async function refreshTasks() {
  const { tasks } = await apiGet('/api/v1/tasks?limit=15');
  fill($('tasks'), ...renderTasks(tasks, state.selectedTask, selectTask));
}

async function refreshDetail() {
  const id = state.selectedTask;
  if (!id) return;
  const readLog = (stream) =>
    apiGet(`/api/v1/tasks/${encodeURIComponent(id)}/logs?stream=${stream}&tail_lines=200`).catch(() => null);
  const [{ task }, stdout, stderr] = await Promise.all([
    apiGet(`/api/v1/tasks/${encodeURIComponent(id)}`),
    readLog('stdout'),
    readLog('stderr'),
  ]);
  if (state.selectedTask !== id) return;
  fill($('task-detail'), ...renderTaskDetail(task, { stdout, stderr }));
}

/**
 * Qualification runs (operators only). A master that lists runs (`GET /api/v1/qualifications`) shows them
 * all; otherwise the page shows the runs named by `qualification:<id>` events since it opened, and any
 * run looked up by id.
 */
async function refreshQualifications() {
  let runs;
  try {
    const body = await apiGet('/api/v1/qualifications');
    runs = body.runs ?? body.items ?? [];
  } catch (err) {
    if (!(err instanceof ApiError) || (err.status !== 404 && err.status !== 403)) throw err;
    // No list route (404) or not an operator (403). Reading a run is operator-only: ask once which.
    state.operator ??= await apiGet('/api/v1/qualifications/-').then(
      () => true,
      (e) => !(e instanceof ApiError && e.status === 403),
    );
    if (err.status === 403 || !state.operator) {
      fill($('qualifications'), empty('Qualification runs are shown to operators.'));
      return;
    }
    const read = (id) => apiGet(`/api/v1/qualifications/${encodeURIComponent(id)}`).catch(() => null);
    runs = (await Promise.all([...state.runIds].map(read))).filter(Boolean);
  }
  runs.sort((a, b) => String(b.created_at).localeCompare(String(a.created_at)));
  const lookup = h(
    'form',
    {
      class: 'lookup',
      onsubmit: (e) => {
        e.preventDefault();
        const id = e.target.elements.run.value.trim();
        if (id) state.runIds.add(id);
        schedule('qualifications');
      },
    },
    h('input', { name: 'run', placeholder: 'Run id (qrun_…)', spellcheck: 'false', 'aria-label': 'Run id' }),
    h('button', { class: 'button', type: 'submit' }, 'Show run'),
  );
  fill($('qualifications'), ...renderQualifications(runs), lookup);
}

async function refreshUsage() {
  // The last 7 days by account (a submitter sees their own account only).
  const until = new Date();
  until.setUTCHours(24, 0, 0, 0);
  const since = new Date(until.getTime() - 7 * 86_400_000);
  const usage = await apiGet(
    `/api/v1/usage?by=account&interval=day&since=${since.toISOString()}&until=${until.toISOString()}`,
  );
  fill($('usage'), ...renderUsage(usage));
}

async function refreshGrants() {
  const { grants } = await apiGet('/api/v1/grants?limit=50');
  $('grants').replaceChildren(...renderGrants(grants, grantAction));
}

/** Approve, reject or revoke one grant from the pane; a refusal shows as the API words it. */
async function grantAction(grant, action, button, result) {
  button.disabled = true;
  fill(result);
  const id = encodeURIComponent(grant.grant_id);
  const comment = action.comment === '' ? {} : { comment: action.comment };
  try {
    if (action.kind === 'decide') {
      const out = await apiPost(`/api/v1/grants/${id}/decide`, { decision: action.decision, ...comment });
      flash(`Grant ${grant.grant_id} is ${out.grant.state.toLowerCase()}.`);
    } else {
      const out = await apiPost(`/api/v1/grants/${id}/revoke`, {
        cancel_running: action.cancel_running,
        ...comment,
      });
      flash(`Grant ${grant.grant_id} revoked; ${out.cancelled_task_ids.length} task(s) cancelled.`);
    }
    schedule('grants', 'tasks', 'queue');
  } catch (err) {
    fill(result, errorBox(err));
    button.disabled = false;
  }
}

/** One proposal awaiting review, with the comment box and the decisions. */
function renderReviewItem(item) {
  const comment = h('textarea', {
    class: 'comment',
    rows: 2,
    placeholder: 'Comments (required): what you checked and why',
    dataset: { comment: item.proposal_id },
    oninput: (e) => state.drafts.set(item.proposal_id, e.target.value),
  });
  comment.value = state.drafts.get(item.proposal_id) ?? '';
  const result = h('div', { class: 'review-result' });
  const body = h('div', { class: 'revision' }, h('p', { class: 'muted' }, 'Loading…'));
  const details = h(
    'details',
    {
      ontoggle: async (e) => {
        if (!e.target.open) return;
        const path = `/api/v1/proposals/${encodeURIComponent(item.proposal_id)}/revisions/${encodeURIComponent(item.revision_id)}`;
        try {
          fill(body, ...renderRevision(await apiGet(path)));
        } catch (err) {
          fill(body, errorBox(err));
        }
      },
    },
    h('summary', {}, 'Spec, findings and changes'),
    body,
  );
  const decide = (decision) => async (e) => {
    const button = e.currentTarget;
    button.disabled = true;
    fill(result);
    try {
      const out = await apiPost(`/api/v1/proposals/${encodeURIComponent(item.proposal_id)}/reviews`, {
        revision_id: item.revision_id,
        revision_digest: item.digest,
        decision,
        comments: comment.value,
      });
      state.drafts.delete(item.proposal_id);
      flash(
        out.task_id
          ? `Approved “${visibleText(item.title)}”: task ${out.task_id} is queued.`
          : `Sent “${visibleText(item.title)}” back to its owner (${out.state.toLowerCase().replaceAll('_', ' ')}).`,
      );
      schedule('reviews', 'tasks', 'queue', 'status');
    } catch (err) {
      fill(result, errorBox(err));
      button.disabled = false;
    }
  };
  return h(
    'article',
    { class: 'review', dataset: { proposal: item.proposal_id } },
    h(
      'div',
      { class: 'review-head' },
      h('strong', {}, visible(item.title)),
      h('span', { class: 'badge' }, `rev ${item.revision_number}`),
      item.own
        ? h('span', { class: 'badge warn', title: 'You may not review your own proposal' }, 'yours')
        : null,
    ),
    h(
      'div',
      { class: 'muted small' },
      `by ${orDash(item.owner)} · ${orDash(item.cards)} card${item.cards === 1 ? '' : 's'} · digest `,
      short(item.digest, 12),
      ` · confirmed ${time(item.confirmed_at)}`,
    ),
    item.errors || item.warnings
      ? h(
          'div',
          { class: item.errors ? 'small bad-text' : 'small warn-text' },
          `${item.errors} error(s), ${item.warnings} warning(s)`,
        )
      : null,
    item.needs_person
      ? h(
          'div',
          { class: 'small warn-text needs-person' },
          'needs a person: agent reviewer ',
          visible(item.needs_person.by),
          ' could not approve (',
          visible(item.needs_person.reason),
          `; ${item.needs_person.attempts} attempt(s))`,
        )
      : null,
    details,
    comment,
    h(
      'div',
      { class: 'actions' },
      h('button', { class: 'button primary', type: 'button', onclick: decide('APPROVE') }, 'Approve'),
      h('button', { class: 'button', type: 'button', onclick: decide('REQUEST_CHANGES') }, 'Request changes'),
    ),
    result,
  );
}

async function refreshReviews() {
  let items;
  try {
    ({ items } = await apiGet('/api/v1/review-queue'));
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) {
      fill($('reviews'), empty('Your token has no reviewer role.'));
      return;
    }
    throw err;
  }
  // Keep the focus and caret of a comment being typed across the re-render.
  const focused = document.activeElement?.dataset?.comment;
  const caret = focused ? document.activeElement.selectionStart : 0;
  fill($('reviews'), ...(items.length ? items.map(renderReviewItem) : [empty('Nothing awaits review.')]));
  if (focused) {
    const box = document.querySelector(`textarea[data-comment="${CSS.escape(focused)}"]`);
    box?.focus();
    box?.setSelectionRange(caret, caret);
  }
}

const VIEWS = {
  cards: refreshCards,
  status: refreshStatus,
  queue: refreshQueue,
  tasks: refreshTasks,
  detail: refreshDetail,
  reviews: refreshReviews,
  qualifications: refreshQualifications,
  grants: refreshGrants,
  usage: refreshUsage,
};

// ---- refresh scheduling ---------------------------------------------------------------------------

const dirty = new Set();
const running = new Set();
let scheduled = false;

/** Marks views to refresh soon; a burst of events becomes one refresh per view. */
function schedule(...views) {
  for (const v of views) dirty.add(v);
  if (scheduled) return;
  scheduled = true;
  setTimeout(runDirty, DEBOUNCE_MS);
}

function runDirty() {
  scheduled = false;
  for (const name of [...dirty]) {
    if (running.has(name)) continue; // re-run once the current refresh is done
    dirty.delete(name);
    running.add(name);
    VIEWS[name]()
      .catch((err) => {
        if (err instanceof ApiError && err.status === 401) signOut('Your token is no longer valid.');
        else console.warn(`refreshing ${name} failed`, err);
      })
      .finally(() => {
        running.delete(name);
        if (dirty.has(name)) schedule();
      });
  }
}

/** Which views a changed topic touches. */
function viewsFor(topic) {
  // A lease released (and charged) changes the cards: usage follows.
  if (topic === 'cards') return ['cards', 'status', 'queue', 'usage'];
  if (topic === 'tasks') return ['tasks', 'queue', 'cards', 'status'];
  if (topic === 'review-queue' || topic.startsWith('proposal:')) return ['reviews'];
  if (topic === 'standing-grants' || topic.startsWith('standing-grant:')) return ['grants'];
  if (topic.startsWith('task:'))
    return topic.slice(5) === state.selectedTask ? ['tasks', 'detail'] : ['tasks'];
  if (topic.startsWith('logs:')) return topic.slice(5) === state.selectedTask ? ['detail'] : [];
  if (topic.startsWith('qualification:')) {
    state.runIds.add(topic.slice('qualification:'.length));
    return ['qualifications'];
  }
  return [];
}

function selectTask(id) {
  state.selectedTask = id;
  fill($('task-detail'), h('p', { class: 'muted' }, 'Loading…'));
  schedule('tasks', 'detail');
}

function flash(text) {
  const el = $('flash');
  el.textContent = text;
  el.hidden = false;
}

function setLive(liveState) {
  const el = $('live');
  el.dataset.state = liveState;
  el.textContent =
    { live: 'live', connecting: 'reconnecting…', unauthorized: 'signed out' }[liveState] ?? liveState;
  if (liveState === 'unauthorized') signOut('Your token is no longer valid.');
}

// ---- sign-in ----------------------------------------------------------------------------------------

function showDashboard() {
  $('signin').hidden = true;
  $('dashboard').hidden = false;
  $('live').hidden = false;
  $('sign-out').hidden = false;
  schedule(...Object.keys(VIEWS));
  state.stopEvents = followEvents({
    onReady: () => schedule(...Object.keys(VIEWS)),
    onTopic: (topic) => schedule(...viewsFor(topic)),
    onState: setLive,
  });
  state.cardsTimer = setInterval(() => {
    if (document.visibilityState === 'visible') schedule('cards');
  }, CARDS_REFRESH_MS);
}

function signOut(message = '') {
  clearToken();
  state.stopEvents?.();
  state.stopEvents = null;
  clearInterval(state.cardsTimer);
  state.selectedTask = null;
  state.operator = null;
  state.runIds.clear();
  for (const id of ['workers', 'alerts', 'task-counts', 'queue', 'reviews', 'tasks', 'qualifications'])
    $(id).replaceChildren();
  fill($('task-detail'), h('p', { class: 'muted' }, 'Select a task to see its placement and logs.'));
  $('flash').hidden = true;
  $('dashboard').hidden = true;
  $('live').hidden = true;
  $('sign-out').hidden = true;
  $('signin').hidden = false;
  $('signin-error').textContent = message;
}

async function signIn(event) {
  event.preventDefault();
  const token = $('token-input').value.trim();
  const error = $('signin-error');
  error.textContent = '';
  if (!token) return;
  try {
    await apiGet('/api/v1/status', token);
  } catch (err) {
    error.textContent =
      err instanceof ApiError && err.status === 401
        ? 'This token is not valid (unknown or revoked).'
        : err instanceof ApiError && err.status === 403
          ? 'Worker tokens cannot sign in; use a person’s or an agent’s token.'
          : `Could not reach the master: ${err.message}`;
    return;
  }
  setToken(token);
  $('token-input').value = '';
  showDashboard();
}

$('signin-form').addEventListener('submit', signIn);
$('sign-out').addEventListener('click', () => signOut());
if (getToken()) showDashboard();
