import { BrokerError } from '../../contracts/errors.js';
import { modelKey, modelNameProblem, modelQuotaProblem } from '../../domain/accounts/model-quotas.js';
import {
  type AccountProblem,
  type AccountQuotas,
  createProblem,
  DEFAULT_ACCOUNT,
  deleteProblem,
  normalisedShares,
  quotaProblem,
  ROOT_ACCOUNT,
  setProblem,
} from '../../domain/accounts/tree.js';
import type { AccountRecord, ModelQuotaRecord } from '../../store/accounts-repo.js';
import type { Principal } from '../../store/principals-repo.js';
import type { UsageGrouping } from '../../store/usage-repo.js';
import type { BrokerDeps } from '../deps.js';
import { iso } from './views.js';

/**
 * Use cases of accounts and usage (docs/operations.md "Accounts and usage"): the operators' account tree
 * (over MCP, REST and `gpu-broker account`, which calls these on the master's data dir) and the usage
 * ledger's summaries. The rules are src/domain/accounts/tree.ts; a refused change writes nothing.
 */

type Deps = Pick<BrokerDeps, 'store' | 'clock'>;

/**
 * A change of quotas: a field absent keeps it, null clears it. With `model`, the fields are that card
 * model's quota (ADR 0048; a model quota left with neither nominal share nor budget is removed), else
 * the account-wide one.
 */
export interface QuotaChange {
  model?: string | undefined;
  nominal_cards?: number | null | undefined;
  borrowing_limit?: number | null | undefined;
  budget_card_hours?: number | null | undefined;
  budget_period?: 'day' | 'week' | 'month' | null | undefined;
}

const NO_QUOTAS: Readonly<AccountQuotas> = {
  nominal_cards: null,
  borrowing_limit: null,
  budget_card_hours: null,
  budget_period: null,
};

/** `before`'s quotas with `change` applied. */
function quotasAfter(before: AccountQuotas, change: QuotaChange): AccountQuotas {
  const pick = <K extends keyof AccountQuotas>(k: K): AccountQuotas[K] =>
    change[k] === undefined ? before[k] : (change[k] as AccountQuotas[K]);
  return {
    nominal_cards: pick('nominal_cards'),
    borrowing_limit: pick('borrowing_limit'),
    budget_card_hours: pick('budget_card_hours'),
    budget_period: pick('budget_period'),
  };
}

const refuse = (p: AccountProblem | null): void => {
  if (p) throw new BrokerError(p.code, p.message, p.hint);
};

/**
 * Writes `name`'s quota for `change.model` with `change` applied, after checking it against the tree and
 * the other model quotas (refused: nothing written); returns it before and after for the audit, or null
 * without `model`. In the caller's transaction.
 */
function changeModelQuota(
  deps: Deps,
  accounts: readonly AccountRecord[],
  name: string,
  change: QuotaChange,
): { model: string; from: AccountQuotas | null; to: AccountQuotas | null } | null {
  if (change.model === undefined) return null;
  const model = change.model.trim();
  refuse(modelNameProblem(model));
  const key = modelKey(model);
  const stored = deps.store.accounts.modelQuotas();
  const before = stored.find((q) => q.account === name && q.model_key === key);
  const from = before === undefined ? null : quotasAfter(before, {});
  const after = quotasAfter(from ?? NO_QUOTAS, change);
  // A budget cleared takes its period with it, as the account-wide flags do.
  if (change.budget_card_hours === null && change.budget_period === undefined) after.budget_period = null;
  // Nothing left of it: it is removed (refused values, e.g. a borrowing limit alone, are checked below).
  const to = Object.values(after).every((v) => v === null) ? null : after;
  refuse(modelQuotaProblem(accounts, stored, name, key, to));
  if (to === null) deps.store.accounts.deleteModelQuota(name, key);
  else deps.store.accounts.putModelQuota({ account: name, model_key: key, model, ...to });
  return { model, from, to };
}

/** A model quota as shown. */
function modelQuotaView(q: ModelQuotaRecord) {
  return {
    model: q.model,
    nominal_cards: q.nominal_cards,
    borrowing_limit: q.borrowing_limit,
    budget_card_hours: q.budget_card_hours,
    budget_period: q.budget_period,
  };
}

/** The view of one account, its share computed against the whole tree. */
function accountView(
  deps: Deps,
  a: AccountRecord,
  shares: ReadonlyMap<string, number>,
  modelQuotas: readonly ModelQuotaRecord[],
) {
  return {
    name: a.name,
    parent: a.parent,
    weight: a.weight,
    share: Math.round((shares.get(a.name) ?? 0) * 1e6) / 1e6,
    description: a.description,
    principals: deps.store.principals.countInAccount(a.name),
    created_at: iso(a.created_at),
    max_priority: a.max_priority,
    preemptible: a.preemptible === 1,
    quotas: {
      nominal_cards: a.nominal_cards,
      borrowing_limit: a.borrowing_limit,
      budget_card_hours: a.budget_card_hours,
      budget_period: a.budget_period,
    },
    model_quotas: modelQuotas.filter((q) => q.account === a.name).map(modelQuotaView),
  };
}

function viewOf(deps: Deps, name: string) {
  const all = deps.store.accounts.list();
  const a = all.find((x) => x.name === name);
  if (!a) throw new BrokerError('NOT_FOUND', `no account ${name}`, 'account list shows them.');
  return accountView(deps, a, normalisedShares(all), deps.store.accounts.modelQuotas());
}

/** list_accounts */
export function listAccounts(deps: Deps) {
  const all = deps.store.accounts.list();
  const shares = normalisedShares(all);
  const modelQuotas = deps.store.accounts.modelQuotas();
  return { accounts: all.map((a) => accountView(deps, a, shares, modelQuotas)) };
}

/** One account (the CLI's `account show`). */
export function getAccount(deps: Deps, name: string) {
  return { account: viewOf(deps, name) };
}

/** create_account: in the caller's transaction (the dispatcher's, or the CLI's). */
export function createAccount(
  deps: Deps,
  actor: string,
  req: {
    name: string;
    parent?: string | undefined;
    weight?: number | undefined;
    description?: string | undefined;
    max_priority?: number | null | undefined;
    preemptible?: boolean | undefined;
  } & QuotaChange,
) {
  const parent = req.parent ?? ROOT_ACCOUNT;
  return deps.store.transaction(() => {
    const all = deps.store.accounts.list();
    refuse(createProblem(all, { name: req.name, parent, weight: req.weight }));
    const now = deps.clock.now();
    const a: AccountRecord = {
      name: req.name,
      parent,
      weight: req.weight ?? 1,
      description: req.description ?? null,
      created_at: now,
      // With `model`, the quota flags are that model's quota, not the account-wide one.
      ...(req.model === undefined ? quotasAfter(NO_QUOTAS, req) : NO_QUOTAS),
      max_priority: req.max_priority ?? null,
      preemptible: req.preemptible === true ? 1 : 0,
    };
    refuse(quotaProblem([...all, a], a.name, a));
    deps.store.accounts.insert(a);
    const modelQuota = changeModelQuota(deps, [...all, a], a.name, req);
    deps.store.audit.append({
      at: now,
      actor,
      action: 'account.created',
      subject_type: 'account',
      subject_id: a.name,
      data: {
        parent: a.parent,
        weight: a.weight,
        quotas: quotasAfter(NO_QUOTAS, a),
        ...(modelQuota === null ? {} : { model_quota: modelQuota }),
      },
    });
    return { account: viewOf(deps, a.name) };
  });
}

/** set_account */
export function setAccount(
  deps: Deps,
  actor: string,
  req: {
    name: string;
    parent?: string | undefined;
    weight?: number | undefined;
    description?: string | null | undefined;
    max_priority?: number | null | undefined;
    preemptible?: boolean | undefined;
  } & QuotaChange,
) {
  return deps.store.transaction(() => {
    const all = deps.store.accounts.list();
    refuse(setProblem(all, req.name, { parent: req.parent, weight: req.weight }));
    const before = all.find((a) => a.name === req.name) as AccountRecord;
    const after: AccountRecord = {
      ...before,
      parent: req.parent ?? before.parent,
      weight: req.weight ?? before.weight,
      description: req.description === undefined ? before.description : req.description,
      ...quotasAfter(before, req.model === undefined ? req : {}),
      max_priority: req.max_priority === undefined ? before.max_priority : req.max_priority,
      preemptible: req.preemptible === undefined ? before.preemptible : req.preemptible ? 1 : 0,
    };
    refuse(
      quotaProblem(
        all.map((a) => (a.name === after.name ? after : a)),
        after.name,
        after,
      ),
    );
    // Model quotas are checked against the tree as it will be: moved under a new parent, each of its own
    // must still sum within that parent's.
    const moved = all.map((a) => (a.name === after.name ? after : a));
    if (after.parent !== before.parent)
      for (const q of deps.store.accounts.modelQuotas())
        if (q.account === after.name)
          refuse(modelQuotaProblem(moved, deps.store.accounts.modelQuotas(), q.account, q.model_key, q));
    const modelQuota = changeModelQuota(deps, moved, after.name, req);
    deps.store.accounts.update(after);
    deps.store.audit.append({
      at: deps.clock.now(),
      actor,
      action: 'account.changed',
      subject_type: 'account',
      subject_id: after.name,
      data: {
        parent: { from: before.parent, to: after.parent },
        weight: { from: before.weight, to: after.weight },
        quotas: { from: quotasAfter(before, {}), to: quotasAfter(after, {}) },
        preemptible: { from: before.preemptible === 1, to: after.preemptible === 1 },
        ...(modelQuota === null ? {} : { model_quota: modelQuota }),
      },
    });
    return { account: viewOf(deps, after.name) };
  });
}

/** delete_account */
export function deleteAccount(deps: Deps, actor: string, name: string) {
  return deps.store.transaction(() => {
    const all = deps.store.accounts.list();
    refuse(
      deleteProblem(all, name, {
        children: all.filter((a) => a.parent === name).length,
        principals: deps.store.principals.countInAccount(name),
        liveTasks: deps.store.tasks.countLiveOfAccount(name),
      }),
    );
    deps.store.accounts.delete(name);
    deps.store.audit.append({
      at: deps.clock.now(),
      actor,
      action: 'account.deleted',
      subject_type: 'account',
      subject_id: name,
      data: {},
    });
    return { deleted: name };
  });
}

const DAY_MS = 86_400_000;
/** 9999-12-31T23:59:59.999Z. */
const LATEST_TIME = 253_402_300_799_999;

function timeOf(field: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const t = Date.parse(value);
  // Between 1970 and the year 9999: every time the ledger can hold, and every one iso() can print.
  if (!Number.isFinite(t) || t < 0 || t > LATEST_TIME)
    throw new BrokerError(
      'INVALID_INPUT',
      `${field}: ${JSON.stringify(value)} is not a time`,
      'e.g. 2026-12-01T00:00:00Z',
    );
  return t;
}

/** get_usage: operators and viewers see every account; anyone else their own account. */
const INTERVAL_MS = { hour: 3_600_000, day: DAY_MS } as const;
/** Most buckets one get_usage `series` holds. */
const MAX_BUCKETS = 400;

export function getUsage(
  deps: Deps,
  principal: Principal,
  q: {
    by?: UsageGrouping | undefined;
    since?: string | undefined;
    until?: string | undefined;
    interval?: 'hour' | 'day' | undefined;
  },
) {
  const until = timeOf('until', q.until, deps.clock.now());
  const since = timeOf('since', q.since, Math.max(0, until - 7 * DAY_MS));
  if (since >= until)
    throw new BrokerError(
      'INVALID_INPUT',
      'since must be before until',
      'e.g. since 2026-12-01, until 2026-12-08',
    );
  const by = q.by ?? 'account';
  // Operators and viewers see every account; reviewers and agent reviewers, like submitters, their own.
  const all = principal.roles.includes('operator') || principal.roles.includes('viewer');
  const account = all ? null : principal.account || DEFAULT_ACCOUNT;
  const lines = deps.store.usage
    .summary({ by, since, until, ...(account === null ? {} : { accounts: [account] }) })
    .map((l) => ({ ...l, card_hours: Math.round((l.card_seconds / 3600) * 1000) / 1000 }));
  const scope = { by, since, until, ...(account === null ? {} : { accounts: [account] }) };
  let series:
    | Array<{ start: string; lines: Array<{ key: string; simulated: boolean; card_seconds: number }> }>
    | undefined;
  if (q.interval !== undefined) {
    const step = INTERVAL_MS[q.interval];
    const buckets = Math.ceil((until - since) / step);
    if (buckets > MAX_BUCKETS)
      throw new BrokerError(
        'INVALID_INPUT',
        `${buckets} ${q.interval}s from since to until; at most ${MAX_BUCKETS} per call`,
        'Shorten the window or use a longer interval.',
      );
    series = Array.from({ length: buckets }, (_, i) => ({ start: iso(since + i * step), lines: [] }));
    for (const r of deps.store.usage.series(scope, step))
      series[r.bucket]?.lines.push({ key: r.key, simulated: r.simulated, card_seconds: r.card_seconds });
  }
  return {
    by,
    since: iso(since),
    until: iso(until),
    account,
    lines,
    total_card_seconds: lines.reduce((n, l) => n + l.card_seconds, 0),
    ...(series === undefined ? {} : { series }),
  };
}
