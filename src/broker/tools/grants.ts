import { BrokerError } from '../../contracts/errors.js';
import { inputInterpreters } from '../../contracts/policy.js';
import type { GrantScope } from '../../contracts/standing-grant.js';
import type { TaskSpec } from '../../contracts/task-spec.js';
import {
  extraArgsReach,
  type GrantState,
  isTerminalGrant,
  prefixScript,
  scopeProblems,
} from '../../domain/grants/grant.js';
import { isTerminalTask } from '../../domain/machines/task.js';
import { resolveLimits } from '../../domain/policy/task-limits.js';
import type { GrantRecord } from '../../store/grants-repo.js';
import type { Principal } from '../../store/principals-repo.js';
import type { RevisionRecord } from '../../store/proposals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { cancelQueuedRunsOf } from '../grant-fence.js';
import { checkGrantRequestQuota } from '../grant-request-quota.js';
import { moveGrant } from '../machines/standing-grant.js';
import { canReadAll } from '../principals.js';
import { GRANTS_TOPIC, grantTopic } from '../topics.js';
import { cancelUnstartedRunsOf } from '../workers/cancel-request.js';
import { fetchViewPage } from './paging.js';
import { decisionKindOfReview } from './revision-diff.js';
import { cancelTaskAs } from './tasks.js';
import { iso, principalName } from './views.js';

/**
 * Use cases of standing grants (docs/decisions/0029-grants.md): request, decide, revoke,
 * list and read. Coverage and auto-approval live in ./grant-approval.ts.
 */

/** What request_grant takes. */
export interface GrantRequest {
  base_revision_id: string;
  scope?: ScopeDraft | undefined;
  max_runs: number;
  max_card_hours: number;
  concurrency?: number | undefined;
  ttl_seconds: number;
  breaker_k?: number | undefined;
  reason: string;
  supersedes?: string | undefined;
}

/** Scope fields a request gives; the rest are drafted from the base revision. */
export type ScopeDraft = { [K in keyof GrantScope]?: GrantScope[K] | undefined };

const isReviewer = (p: Principal) => p.roles.includes('reviewer') || p.roles.includes('operator');

/**
 * The scope drafted from the base revision, with the request's fields over it. Arguments past the
 * drafted `[argv0, argv1]` are allowed (`script`) only when argv[1] is an input the policy runs as a
 * script; otherwise (`make train`, `uv run …`, `torchrun …`, any launcher) argv is fixed (`none`) unless
 * the request widens it on purpose (`any_unsafe`).
 */
export function draftScope(deps: BrokerDeps, base: TaskSpec, over: ScopeDraft = {}): GrantScope {
  const rt = base.runtime;
  const prefix = over.argv_prefix ?? rt.argv.slice(0, Math.min(2, rt.argv.length));
  const script = prefixScript(prefix, base, inputInterpreters(deps.config.policy.scripts));
  return {
    argv_prefix: prefix,
    extra_args: script === undefined ? 'none' : 'script',
    mutable_inputs: [],
    max_cards: base.cards.count,
    max_time_limit_seconds: base.time_limit_seconds,
    limits: resolveLimits(base, deps.config.policy),
    workers: null,
    env: [],
    image: rt.kind === 'container' ? rt.image : null,
    max_priority: base.priority ?? 0,
    ...(Object.fromEntries(Object.entries(over).filter(([, v]) => v !== undefined)) as Partial<GrantScope>),
  };
}

/**
 * The base revision: one that ran, approved by a PERSON (a revision only a grant or an
 * agent reviewer approved was read by no person, so nothing a grant compares with it was reviewed),
 * visible to the principal.
 */
function baseRevision(
  deps: BrokerDeps,
  principal: Principal,
  id: string,
): { r: RevisionRecord; owner: string } {
  const r = deps.store.proposals.revision(id);
  const p = r ? deps.store.proposals.get(r.proposal_id) : undefined;
  if (!r || !p || (p.owner_id !== principal.id && !canReadAll(principal)))
    throw new BrokerError('NOT_FOUND', `no revision ${id}`, 'Use a revision id of one of your proposals.');
  if (p.task_id === null || deps.store.tasks.get(p.task_id)?.revision_id !== r.id)
    throw new BrokerError(
      'INVALID_STATE',
      `revision ${id} never ran`,
      'A grant is based on a revision a reviewer approved: get one approved first, then request the grant from it.',
    );
  const approval = deps.store.proposals.reviews(p.id).find((v) => v.revision_id === r.id);
  const who = approval ? decisionKindOfReview(deps, approval) : null;
  if (who?.kind !== 'person')
    throw new BrokerError(
      'INVALID_STATE',
      who?.kind === 'grant'
        ? `revision ${id} was approved by ${who.decided_by}, no person read it`
        : `revision ${id} was approved by ${who?.decided_by ?? 'nobody'} (an agent reviewer), no person read it`,
      'A grant’s base must be a revision a person approved: base it on the person-approved revision this one descends from, or get this one reviewed by a person.',
      { approved_by: who?.decided_by ?? null, kind: who?.kind ?? null },
    );
  if (p.owner_id !== principal.id && !isReviewer(principal))
    throw new BrokerError(
      'FORBIDDEN',
      'only the revision’s owner or a reviewer may request a grant from it',
      '',
    );
  return { r, owner: p.owner_id };
}

/** request_grant: a REQUESTED grant for the owner of the base revision. Call inside a transaction. */
export function requestGrant(deps: BrokerDeps, principal: Principal, q: GrantRequest) {
  const { r, owner } = baseRevision(deps, principal, q.base_revision_id);
  const scope = draftScope(deps, r.spec, q.scope);
  const problems = scopeProblems(scope, {
    spec: r.spec,
    interpreters: inputInterpreters(deps.config.policy.scripts),
  });
  if ((r.spec.network ?? 'none') !== 'none')
    problems.push('the base revision uses the network; grants cover network none only');
  if (problems.length)
    throw new BrokerError(
      'INVALID_INPUT',
      `the scope cannot be granted: ${problems.join('; ')}`,
      'Narrow the scope.',
      {
        problems,
      },
    );
  if (q.supersedes !== undefined) {
    const old = deps.store.grants.get(q.supersedes);
    if (!old || old.grantee_id !== owner)
      throw new BrokerError(
        'NOT_FOUND',
        `no grant ${q.supersedes} of the same grantee`,
        'list_grants shows them.',
      );
  }
  checkGrantRequestQuota(deps, principal, { scope, reason: q.reason });
  const now = deps.clock.now();
  const ttl = Math.min(q.ttl_seconds, deps.config.grants.max_ttl_seconds);
  const g: GrantRecord = {
    id: deps.ids('grt'),
    grantee_id: owner,
    created_by: principal.id,
    decided_by: null,
    base_revision_id: r.id,
    supersedes: q.supersedes ?? null,
    scope,
    reason: q.reason,
    max_runs: q.max_runs,
    max_card_seconds: Math.max(1, Math.round(q.max_card_hours * 3600)),
    concurrency: q.concurrency ?? 1,
    breaker_k: q.breaker_k ?? 3,
    expires_at: now + ttl * 1000,
    state: 'REQUESTED',
    decision_comment: null,
    runs_used: 0,
    card_seconds_charged: 0,
    card_seconds_reserved: 0,
    running: 0,
    consecutive_failures: 0,
    alerted: [],
    created_at: now,
    updated_at: now,
    decided_at: null,
  };
  deps.store.grants.insert(g);
  deps.store.audit.append({
    at: now,
    actor: principal.name,
    action: 'standing_grant.requested',
    subject_type: 'standing_grant',
    subject_id: g.id,
    data: { grantee_id: owner, base_revision_id: r.id, supersedes: g.supersedes, ttl_seconds: ttl },
  });
  deps.store.afterCommit(() => deps.notifier.notify(GRANTS_TOPIC));
  return {
    grant: grantView(deps, g),
    next_action: `A reviewer other than ${principalName(deps.store, owner)} decides it with decide_grant (grant_id ${g.id}).`,
  };
}

/** Loads a grant the principal may see: its grantee's, its requester's, or anyone's for readers of all. */
export function loadVisibleGrant(deps: BrokerDeps, principal: Principal, id: string): GrantRecord {
  const g = deps.store.grants.get(id);
  if (!g || (g.grantee_id !== principal.id && g.created_by !== principal.id && !canReadAll(principal)))
    throw new BrokerError('NOT_FOUND', `no grant ${id}`, 'list_grants shows the grants you may see.');
  return g;
}

/** decide_grant: approve or reject one REQUESTED grant; never by its grantee. */
export function decideGrant(
  deps: BrokerDeps,
  principal: Principal,
  q: { grant_id: string; decision: 'APPROVE' | 'REJECT'; comment?: string | undefined },
) {
  const g = loadVisibleGrant(deps, principal, q.grant_id);
  if (g.grantee_id === principal.id)
    throw new BrokerError(
      'SELF_GRANT_FORBIDDEN',
      'you are the grantee of this grant and may not decide it',
      'Ask another reviewer; a grant is a review decision and needs an independent one.',
    );
  // Nor its requester (ADR 0029): a reviewer who drafted a scope for someone else would otherwise
  // approve her own draft. The database refuses it too (migration 015).
  if (g.created_by === principal.id)
    throw new BrokerError(
      'SELF_GRANT_FORBIDDEN',
      'you requested this grant and may not decide it',
      'Ask another reviewer; the one who drafts a grant never decides it.',
    );
  const now = deps.clock.now();
  if (q.decision === 'APPROVE' && g.expires_at <= now)
    throw new BrokerError(
      'INVALID_STATE',
      `grant ${g.id} expired before it was decided`,
      'Request a new one.',
    );
  const next = moveGrant(
    deps,
    g,
    q.decision === 'APPROVE' ? 'approve' : 'reject',
    principal.name,
    { decided_by: principal.id, decided_at: now, decision_comment: q.comment ?? null },
    { decision: q.decision },
  );
  // The grant it supersedes stops once this one is live: one scope at a time per lineage.
  if (q.decision === 'APPROVE' && next.supersedes !== null) {
    const old = deps.store.grants.get(next.supersedes);
    if (old && !isTerminalGrant(old.state))
      moveGrant(deps, old, 'revoke', principal.name, {}, { superseded_by: next.id });
  }
  return { grant: grantView(deps, next) };
}

/**
 * revoke_grant: REVOKED at once (the next confirm no longer matches it); with cancel_running, its
 * tasks that have not ended are cancelled through cancel_task's path. A reviewer or operator may revoke
 * any grant; the grantee its own; the requester its own undecided request.
 */
export function revokeGrant(
  deps: BrokerDeps,
  principal: Principal,
  q: { grant_id: string; cancel_running?: boolean | undefined; comment?: string | undefined },
) {
  const g = loadVisibleGrant(deps, principal, q.grant_id);
  // Narrowing needs no review: the grantee may give up its grant, the requester withdraw its request.
  const own = g.grantee_id === principal.id || (g.state === 'REQUESTED' && g.created_by === principal.id);
  if (!isReviewer(principal) && !own)
    throw new BrokerError(
      'FORBIDDEN',
      'only a reviewer, an operator or the grantee may revoke a grant',
      'Ask a reviewer.',
    );
  const next = moveGrant(deps, g, 'revoke', principal.name, {}, { comment: q.comment ?? null });
  // Runs it approved that have not started never will, cancel_running or not (ADR 0029).
  const cancelled = [
    ...cancelQueuedRunsOf(deps, next, `${principal.name} (revoked grant ${g.id})`),
    ...cancelUnstartedRunsOf(deps, g.id, `${principal.name} (revoked grant ${g.id})`),
  ];
  if (q.cancel_running)
    for (const run of deps.store.grants.openRuns(g.id)) {
      const t = deps.store.tasks.get(run.task_id);
      if (!t || isTerminalTask(t.state) || cancelled.includes(t.id)) continue;
      cancelTaskAs(deps, `${principal.name} (revoked grant ${g.id})`, t);
      cancelled.push(t.id);
    }
  deps.store.afterCommit(() => deps.notifier.notify(grantTopic(g.id)));
  return { grant: grantView(deps, deps.store.grants.get(g.id) ?? next), cancelled_task_ids: cancelled };
}

/** list_grants. */
export function listGrants(
  deps: BrokerDeps,
  principal: Principal,
  q: { state?: GrantState | undefined; limit?: number | undefined; cursor?: string | undefined },
) {
  const { page, next_cursor } = fetchViewPage(
    q.limit,
    (limit) =>
      deps.store.grants.list({
        principal_id: canReadAll(principal) ? null : principal.id,
        state: q.state ?? null,
        ...(q.cursor ? { before_id: q.cursor } : {}),
        limit,
      }),
    (g) => grantView(deps, g),
    (g) => g.id,
  );
  return { grants: page, next_cursor };
}

const hours = (s: number) => Math.round((s / 3600) * 1e6) / 1e6;

/** A grant as shown. */
export function grantView(deps: Pick<BrokerDeps, 'store'>, g: GrantRecord) {
  return {
    grant_id: g.id,
    state: g.state,
    grantee: principalName(deps.store, g.grantee_id),
    requested_by: principalName(deps.store, g.created_by),
    decided_by: g.decided_by === null ? null : principalName(deps.store, g.decided_by),
    base_revision_id: g.base_revision_id,
    supersedes: g.supersedes,
    scope: g.scope,
    /** What arguments past argv_prefix reach, in words (grant show and the dashboard print it). */
    extra_args_reach: extraArgsReach(g.scope),
    reason: g.reason,
    decision_comment: g.decision_comment,
    budget: {
      max_runs: g.max_runs,
      runs_used: g.runs_used,
      max_card_hours: hours(g.max_card_seconds),
      card_hours_charged: hours(g.card_seconds_charged),
      card_hours_reserved: hours(g.card_seconds_reserved),
      concurrency: g.concurrency,
      running: g.running,
      breaker_k: g.breaker_k,
      consecutive_failures: g.consecutive_failures,
    },
    expires_at: iso(g.expires_at),
    created_at: iso(g.created_at),
    decided_at: iso(g.decided_at),
  };
}
