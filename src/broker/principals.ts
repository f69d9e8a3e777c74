import { randomBytes, timingSafeEqual } from 'node:crypto';
import { BrokerError } from '../contracts/errors.js';
import { WORKER_ID_RULE, WorkerIdSchema } from '../contracts/worker-protocol.js';
import { DEFAULT_ACCOUNT, ROOT_ACCOUNT } from '../domain/accounts/tree.js';
import { sha256Hex } from '../platform/digest.js';
import type { Principal, Role } from '../store/principals-repo.js';
import { ROLES } from '../store/principals-repo.js';
import type { BrokerDeps } from './deps.js';

/**
 * Tokens and principals (docs/security.md "Tokens"). A token is 32 random bytes, shown once, stored only as
 * its sha256. Also the principal rules the edges call instead of reading roles themselves (docs/architecture.md,
 * "edges hold no policy"): who may open a worker session, upload or fetch an input, learn that a topic changed, and open
 * one more event stream.
 */

/** The principal and role types, for the edges (which never import src/store/). */
export type { Principal, Role };

/** Prefix that makes a leaked token easy to recognise and grep for. */
export const TOKEN_PREFIX = 'gpb_';

/** Creates a principal and returns its token (the only time the token exists in clear). */
export function createPrincipal(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'ids'>,
  input: {
    name: string;
    roles: readonly string[];
    worker_id?: string | undefined;
    account?: string | undefined;
  },
  actor = 'local-admin',
): { principal: Principal; token: string } {
  const roles = [...new Set(input.roles)];
  const bad = roles.filter((r) => !(ROLES as readonly string[]).includes(r));
  if (bad.length > 0 || roles.length === 0)
    throw new BrokerError(
      'INVALID_INPUT',
      `unknown role(s): ${bad.join(', ') || '(none given)'}`,
      `Roles are ${ROLES.join(', ')}.`,
    );
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(input.name))
    throw new BrokerError(
      'INVALID_INPUT',
      `bad principal name "${input.name}"`,
      'Use 1-64 letters, digits, ".", "_" or "-".',
    );
  // An agent reviewer's approvals are bounded by the ceiling; any other role beside it would blur
  // whether a person or the agent decided (docs/decisions/0027-agent-reviewer.md).
  if (roles.includes('agent_reviewer') && roles.length > 1)
    throw new BrokerError(
      'INVALID_INPUT',
      'an agent reviewer token holds only the agent_reviewer role',
      'Create separate tokens for people and for agent reviewers.',
    );
  const isWorker = roles.includes('worker');
  if (isWorker && roles.length > 1)
    throw new BrokerError(
      'INVALID_INPUT',
      'a worker token holds only the worker role',
      'Create separate tokens for people and workers.',
    );
  if (isWorker !== (input.worker_id !== undefined))
    throw new BrokerError(
      'INVALID_INPUT',
      'worker tokens need --worker-id, and only worker tokens take it',
      'e.g. --role worker --worker-id gpu-host-1',
    );
  // The rule hello enforces: a token bound to any other id could never connect (docs/state-machines.md).
  if (input.worker_id !== undefined && !WorkerIdSchema.safeParse(input.worker_id).success)
    throw new BrokerError(
      'INVALID_INPUT',
      `bad worker id ${JSON.stringify(input.worker_id)}: ${WORKER_ID_RULE}`,
      'e.g. --role worker --worker-id gpu-host-1',
    );
  const token = TOKEN_PREFIX + randomBytes(32).toString('base64url');
  const now = deps.clock.now();
  const principal: Principal = {
    id: deps.ids('prin'),
    name: input.name,
    roles: roles as Role[],
    worker_id: input.worker_id ?? null,
    account: input.account ?? DEFAULT_ACCOUNT,
    created_at: now,
    revoked_at: null,
  };
  deps.store.transaction(() => {
    if (principal.account === ROOT_ACCOUNT || !deps.store.accounts.get(principal.account))
      throw new BrokerError(
        principal.account === ROOT_ACCOUNT ? 'INVALID_INPUT' : 'NOT_FOUND',
        principal.account === ROOT_ACCOUNT
          ? 'no principal belongs to root: it holds the tree'
          : `no account ${principal.account}`,
        'Name a team account (gpu-broker account list; account create NAME makes one), or leave --account out for default.',
      );
    if (deps.store.principals.findByName(input.name))
      throw new BrokerError(
        'CONFLICT',
        `a principal named "${input.name}" exists`,
        'Pick another name or revoke the old one.',
      );
    deps.store.principals.insert({ ...principal, token_hash: sha256Hex(token) });
    deps.store.audit.append({
      at: now,
      actor,
      action: 'principal.created',
      subject_type: 'principal',
      subject_id: principal.id,
      data: {
        name: principal.name,
        roles: principal.roles,
        worker_id: principal.worker_id,
        account: principal.account,
      },
    });
  });
  return { principal, token };
}

/** Revokes a principal's token by name. */
export function revokePrincipal(
  deps: Pick<BrokerDeps, 'store' | 'clock'>,
  name: string,
  actor = 'local-admin',
): void {
  deps.store.transaction(() => {
    const p = deps.store.principals.findByName(name);
    if (!p || !deps.store.principals.revoke(name, deps.clock.now()))
      throw new BrokerError('NOT_FOUND', `no live principal named "${name}"`, 'See `gpu-broker token list`.');
    deps.store.audit.append({
      at: deps.clock.now(),
      actor,
      action: 'principal.revoked',
      subject_type: 'principal',
      subject_id: p.id,
      data: { name },
    });
  });
}

/** Resolves a bearer token to its live principal, or throws UNAUTHENTICATED. */
export function authenticate(deps: Pick<BrokerDeps, 'store'>, token: string | undefined): Principal {
  const fail = () =>
    new BrokerError(
      'UNAUTHENTICATED',
      'missing, unknown or revoked token',
      'Send "Authorization: Bearer <token>" with a live token.',
    );
  if (!token || token.length > 512) throw fail();
  const hash = sha256Hex(token);
  const found = deps.store.principals.findByTokenHash(hash);
  // The lookup is by hash of a 256-bit random token; the comparison is constant-time regardless.
  if (!found || !timingSafeEqual(Buffer.from(found.token_hash), Buffer.from(hash))) throw fail();
  if (found.principal.revoked_at !== null) throw fail();
  return found.principal;
}

/** Pulls the token out of an `Authorization: Bearer …` header. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m?.[1];
}

/** True if the principal holds any of `roles`. */
export function hasAnyRole(p: Principal, roles: readonly string[]): boolean {
  return p.roles.some((r) => roles.includes(r));
}

/** Reviewers and operators read every proposal and task; submitters only their own. */
export function canReadAll(p: Principal): boolean {
  return p.roles.includes('reviewer') || p.roles.includes('operator') || p.roles.includes('agent_reviewer');
}

/**
 * The worker session a bearer token may open (the WSS upgrade, src/ws/hub.ts): the token's live
 * principal must be a worker token bound to a worker id. Throws UNAUTHENTICATED for no live token and
 * FORBIDDEN for any other principal.
 */
export function authenticateWorker(
  deps: Pick<BrokerDeps, 'store'>,
  token: string | undefined,
): { workerId: string; principalId: string } {
  const principal = authenticate(deps, token);
  if (!principal.roles.includes('worker') || !principal.worker_id)
    throw new BrokerError('FORBIDDEN', 'not a worker token', 'Create one with --role worker --worker-id ID.');
  return { workerId: principal.worker_id, principalId: principal.id };
}

/** Uploading input bytes (PUT /api/v1/blobs) needs the submitter role; FORBIDDEN otherwise. */
export function requireUploader(p: Principal): void {
  if (!p.roles.includes('submitter'))
    throw new BrokerError('FORBIDDEN', 'uploading inputs needs the submitter role', 'Use a submitter token.');
}

/**
 * The worker whose executions' inputs `p` may fetch (GET /api/v1/executions/…/inputs/…): only a worker
 * token, bound to its worker id; FORBIDDEN for anyone else (people read inputs with get_input).
 */
export function inputFetcherWorker(p: Principal): string {
  if (!p.roles.includes('worker') || !p.worker_id)
    throw new BrokerError('FORBIDDEN', 'only worker tokens fetch execution inputs', 'Use get_input.');
  return p.worker_id;
}

const ID_TOPIC = /^(task|logs|proposal|standing-grant):(.+)$/;

/**
 * Whether `p` may learn that `topic` changed (the dashboard's event stream, src/http/events.ts): topics
 * that carry an id reach a submitter only for its own task or proposal and for the standing grants it
 * holds or made (other owners' ids are not shown to it anywhere else either); `qualification:<run>`
 * reaches operators only (their tools are operator-only); the id-less topics reach everyone.
 */
export function maySeeTopic(deps: Pick<BrokerDeps, 'store'>, p: Principal, topic: string): boolean {
  if (topic.startsWith('qualification:')) return p.roles.includes('operator');
  const m = ID_TOPIC.exec(topic);
  if (!m || canReadAll(p)) return true;
  const id = m[2] ?? '';
  if (m[1] === 'standing-grant') {
    const g = deps.store.grants.get(id);
    return g?.grantee_id === p.id || g?.created_by === p.id;
  }
  const owner =
    m[1] === 'proposal' ? deps.store.proposals.get(id)?.owner_id : deps.store.tasks.get(id)?.owner_id;
  return owner === p.id;
}

/**
 * Whether one more event stream may open (docs/state-machines.md): a principal has at most `perPrincipal`
 * streams, and everyone but operators shares `max - operatorReserve`, so one viewer token opening
 * hundreds of streams hits its own limit first and never takes the operators' share.
 */
export function admitStream(
  counts: { total: number; ofPrincipal: number },
  principal: Pick<Principal, 'roles'>,
  limits: { max: number; perPrincipal: number; operatorReserve: number },
): { ok: true } | { ok: false; code: 'QUOTA_EXCEEDED' | 'UNAVAILABLE' } {
  if (counts.ofPrincipal >= limits.perPrincipal) return { ok: false, code: 'QUOTA_EXCEEDED' };
  const cap = principal.roles.includes('operator') ? limits.max : limits.max - limits.operatorReserve;
  if (counts.total >= cap) return { ok: false, code: 'UNAVAILABLE' };
  return { ok: true };
}
