/**
 * Accounts (docs/operations.md "Accounts and usage"): every principal belongs to exactly one account, and
 * accounts form a tree under `root` (the organisation), each with a fair-share weight. Pure: the broker
 * passes the accounts as they are and what a request would change, and gets back the one problem that
 * refuses it (nothing changes then) or null.
 */

/** The account at the top of the tree; it cannot be changed or deleted, and holds no principal. */
export const ROOT_ACCOUNT = 'root';
/** Where a principal goes when no account is named (and where an existing database put everyone). */
export const DEFAULT_ACCOUNT = 'default';
/** The deepest an account may sit below root (root's children are depth 1). */
export const MAX_ACCOUNT_DEPTH = 8;
/** The largest fair-share weight. */
export const MAX_ACCOUNT_WEIGHT = 1_000_000;

/** What an account name may be: lower-case letters, digits, `.`, `_`, `-`; starting with a letter or digit. */
export const ACCOUNT_NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,63}$/;
export const ACCOUNT_NAME_RULE =
  'an account name is 1-64 lower-case letters, digits, ".", "_" or "-", starting with a letter or digit';

/** One account as the rules see it. */
export interface AccountNode {
  name: string;
  parent: string | null;
  weight: number;
}

/** Why a change is refused: a typed code, what is wrong, and what to do instead. */
export interface AccountProblem {
  code: 'INVALID_INPUT' | 'NOT_FOUND' | 'CONFLICT' | 'INVALID_STATE';
  message: string;
  hint: string;
}

const problem = (code: AccountProblem['code'], message: string, hint: string): AccountProblem => ({
  code,
  message,
  hint,
});

function weightProblem(weight: number | undefined): AccountProblem | null {
  if (weight === undefined) return null;
  if (!Number.isInteger(weight) || weight < 1 || weight > MAX_ACCOUNT_WEIGHT)
    return problem(
      'INVALID_INPUT',
      `weight ${weight} is not a whole number from 1 to ${MAX_ACCOUNT_WEIGHT}`,
      'A weight is relative to its siblings: 1 for an equal share, 2 for twice that.',
    );
  return null;
}

/** The depth of `name` below root (root 0), or null when its chain of parents does not reach root. */
function depthOf(byName: ReadonlyMap<string, AccountNode>, name: string): number | null {
  let depth = 0;
  for (let at = byName.get(name); at; at = at.parent === null ? undefined : byName.get(at.parent)) {
    if (at.parent === null) return at.name === ROOT_ACCOUNT ? depth : null;
    if (++depth > byName.size) return null; // a cycle
  }
  return null;
}

/** Whether a new account `name` under `parent` with `weight` may be created among `accounts`. */
export function createProblem(
  accounts: readonly AccountNode[],
  req: { name: string; parent: string; weight?: number | undefined },
): AccountProblem | null {
  if (!ACCOUNT_NAME_PATTERN.test(req.name))
    return problem(
      'INVALID_INPUT',
      `account ${JSON.stringify(req.name)}: ${ACCOUNT_NAME_RULE}`,
      'e.g. team-a',
    );
  const byName = new Map(accounts.map((a) => [a.name, a]));
  if (byName.has(req.name))
    return problem(
      'CONFLICT',
      `account ${req.name} already exists`,
      'Change it with account set, or pick another name.',
    );
  if (!byName.has(req.parent))
    return problem(
      'NOT_FOUND',
      `no account ${req.parent} to be the parent`,
      `Create ${req.parent} first, or name an existing parent (account list).`,
    );
  const parentDepth = depthOf(byName, req.parent);
  if (parentDepth === null || parentDepth + 1 > MAX_ACCOUNT_DEPTH)
    return problem(
      'INVALID_INPUT',
      `account ${req.name} under ${req.parent} would be deeper than ${MAX_ACCOUNT_DEPTH} levels below root`,
      'Place it higher in the tree.',
    );
  return weightProblem(req.weight);
}

/** Whether `name`'s weight and parent may change to what `req` asks. */
export function setProblem(
  accounts: readonly AccountNode[],
  name: string,
  req: { parent?: string | undefined; weight?: number | undefined },
): AccountProblem | null {
  const byName = new Map(accounts.map((a) => [a.name, a]));
  const at = byName.get(name);
  if (!at) return problem('NOT_FOUND', `no account ${name}`, 'account list shows them.');
  if (name === ROOT_ACCOUNT && req.parent !== undefined)
    return problem('INVALID_INPUT', 'root has no parent', 'Move the accounts under root instead.');
  const weight = weightProblem(req.weight);
  if (weight) return weight;
  if (req.parent === undefined || req.parent === at.parent) return null;
  if (!byName.has(req.parent))
    return problem('NOT_FOUND', `no account ${req.parent} to be the parent`, 'account list shows them.');
  // A cycle: the new parent sits below the account being moved (or is it).
  const moved = new Map(byName);
  moved.set(name, { ...at, parent: req.parent });
  if (depthOf(moved, name) === null)
    return problem(
      'INVALID_INPUT',
      `moving ${name} under ${req.parent} makes a cycle: ${req.parent} is ${name} or below it`,
      'Move it under an account that is not one of its own descendants.',
    );
  const deepest = Math.max(
    ...accounts.filter((a) => isWithin(moved, a.name, name)).map((a) => depthOf(moved, a.name) ?? 0),
  );
  if (deepest > MAX_ACCOUNT_DEPTH)
    return problem(
      'INVALID_INPUT',
      `moving ${name} under ${req.parent} puts accounts deeper than ${MAX_ACCOUNT_DEPTH} levels below root`,
      'Place it higher in the tree.',
    );
  return null;
}

/** Whether `name` is `ancestor` or below it. */
function isWithin(byName: ReadonlyMap<string, AccountNode>, name: string, ancestor: string): boolean {
  for (let at = byName.get(name), n = 0; at && n <= byName.size; n++) {
    if (at.name === ancestor) return true;
    at = at.parent === null ? undefined : byName.get(at.parent);
  }
  return false;
}

/** What holds an account: its child accounts, the principals in it, its tasks not yet ended. */
export interface AccountHolds {
  children: number;
  principals: number;
  liveTasks: number;
}

/** Whether `name` may be deleted. */
export function deleteProblem(
  accounts: readonly AccountNode[],
  name: string,
  holds: AccountHolds,
): AccountProblem | null {
  if (!accounts.some((a) => a.name === name))
    return problem('NOT_FOUND', `no account ${name}`, 'account list shows them.');
  if (name === ROOT_ACCOUNT || name === DEFAULT_ACCOUNT)
    return problem(
      'INVALID_INPUT',
      `${name} cannot be deleted`,
      `${ROOT_ACCOUNT} holds the tree and ${DEFAULT_ACCOUNT} holds principals placed nowhere else.`,
    );
  const held = [
    holds.children > 0 ? `${holds.children} child account(s)` : null,
    holds.principals > 0 ? `${holds.principals} principal(s)` : null,
    holds.liveTasks > 0 ? `${holds.liveTasks} task(s) not yet ended` : null,
  ].filter((x) => x !== null);
  if (held.length > 0)
    return problem(
      'INVALID_STATE',
      `account ${name} still holds ${held.join(', ')}`,
      'Move or delete its child accounts, move its principals (token create --account, or revoke them), and let its tasks end first; its usage history stays.',
    );
  return null;
}

/**
 * Each account's normalised share of the pool: the product, down its path from root, of its weight over
 * the sum of its siblings' weights (and its own), as Slurm's classic fair share defines it. Root is 1.
 */
export function normalisedShares(accounts: readonly AccountNode[]): Map<string, number> {
  const siblingsWeight = new Map<string, number>();
  for (const a of accounts)
    if (a.parent !== null) siblingsWeight.set(a.parent, (siblingsWeight.get(a.parent) ?? 0) + a.weight);
  const byName = new Map(accounts.map((a) => [a.name, a]));
  const out = new Map<string, number>();
  const shareOf = (name: string, guard: number): number => {
    const known = out.get(name);
    if (known !== undefined) return known;
    const a = byName.get(name);
    if (!a || a.parent === null || guard > accounts.length) return 1;
    const s = shareOf(a.parent, guard + 1) * (a.weight / (siblingsWeight.get(a.parent) ?? a.weight));
    out.set(name, s);
    return s;
  };
  for (const a of accounts) out.set(a.name, shareOf(a.name, 0));
  return out;
}

/** An account's quotas (docs/operations.md "Accounts and usage"); null fields: no such limit. */
export interface AccountQuotas {
  nominal_cards: number | null;
  borrowing_limit: number | null;
  budget_card_hours: number | null;
  budget_period: 'day' | 'week' | 'month' | null;
}

/** The most cards a quota names. */
export const MAX_QUOTA_CARDS = 100_000;

/**
 * Whether `name` may have `quotas` among `accounts` (each with its own quotas): whole, non-negative card
 * counts; a budget with its period and a period with its budget; a borrowing limit only beside a nominal
 * share; and children's nominal shares summing within their parent's (both ways: a parent's nominal never
 * drops below what its children hold, a child's never pushes the sum past its parent's).
 */
export function quotaProblem(
  accounts: ReadonlyArray<AccountNode & AccountQuotas>,
  name: string,
  quotas: AccountQuotas,
): AccountProblem | null {
  const values = quotaValuesProblem(quotas);
  if (values) return values;
  const self = accounts.find((a) => a.name === name);
  const parent = self?.parent ? accounts.find((a) => a.name === self.parent) : undefined;
  const nominal = quotas.nominal_cards ?? 0;
  if (parent && parent.nominal_cards !== null && quotas.nominal_cards !== null) {
    const siblings = accounts
      .filter((a) => a.parent === parent.name && a.name !== name)
      .reduce((n, a) => n + (a.nominal_cards ?? 0), 0);
    if (siblings + nominal > parent.nominal_cards)
      return problem(
        'INVALID_INPUT',
        `${name}'s nominal ${nominal} and its siblings' ${siblings} exceed ${parent.name}'s nominal ${parent.nominal_cards}`,
        `Children's nominal shares sum within their parent's: raise ${parent.name}'s or lower another child's first.`,
      );
  }
  if (quotas.nominal_cards !== null) {
    const children = accounts
      .filter((a) => a.parent === name)
      .reduce((n, a) => n + (a.nominal_cards ?? 0), 0);
    if (children > quotas.nominal_cards)
      return problem(
        'INVALID_INPUT',
        `${name}'s children hold nominal shares of ${children} cards, more than ${quotas.nominal_cards}`,
        'Lower the children first, or give this account at least their sum.',
      );
  }
  return null;
}

/**
 * Whether `quotas`' values may stand, whatever the tree: whole card counts from 0 to MAX_QUOTA_CARDS, a
 * borrowing limit only beside a nominal share, a positive budget with its period and a period with its
 * budget. The account-wide quota (quotaProblem) and each per-model one (./model-quotas.ts) check these.
 */
export function quotaValuesProblem(quotas: AccountQuotas): AccountProblem | null {
  for (const [field, value] of [
    ['nominal_cards', quotas.nominal_cards],
    ['borrowing_limit', quotas.borrowing_limit],
  ] as const)
    if (value !== null && (!Number.isInteger(value) || value < 0 || value > MAX_QUOTA_CARDS))
      return problem(
        'INVALID_INPUT',
        `${field} ${value} is not a whole number of cards from 0 to ${MAX_QUOTA_CARDS}`,
        'e.g. 4',
      );
  if (quotas.borrowing_limit !== null && quotas.nominal_cards === null)
    return problem(
      'INVALID_INPUT',
      'a borrowing limit needs a nominal share to borrow beyond',
      'Set nominal_cards too.',
    );
  const b = quotas.budget_card_hours;
  if (b !== null && (!Number.isFinite(b) || b <= 0 || b > 100_000_000))
    return problem(
      'INVALID_INPUT',
      `budget_card_hours ${b} is not a positive number of card-hours`,
      'e.g. 200',
    );
  if ((b === null) !== (quotas.budget_period === null))
    return problem(
      'INVALID_INPUT',
      'a budget needs its period, and a period its budget',
      'e.g. budget 200 card-hours per week.',
    );
  return null;
}

const DAY_MS = 86_400_000;

/** Year and month (1-12) of a day number since 1970-01-01 (Hinnant's civil_from_days; no Date: pure). */
function civil(days: number): { y: number; m: number } {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor(
    (doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365,
  );
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const m = mp < 10 ? mp + 3 : mp - 9;
  return { y: yoe + era * 400 + (m <= 2 ? 1 : 0), m };
}

/** `ms` as an ISO 8601 UTC time to the second (no Date: pure), e.g. 2026-12-07T00:00:00Z. */
export function isoUtc(ms: number): string {
  const days = Math.floor(ms / DAY_MS);
  const { y, m } = civil(days);
  const d = days - daysFromCivil(y, m) + 1;
  const secs = Math.floor((ms - days * DAY_MS) / 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${y}-${two(m)}-${two(d)}T${two(Math.floor(secs / 3600))}:${two(Math.floor(secs / 60) % 60)}:${two(secs % 60)}Z`;
}

/** The day number of year `y`, month `m` (1-12), day 1 (Hinnant's days_from_civil). */
function daysFromCivil(y: number, m: number): number {
  const yy = m <= 2 ? y - 1 : y;
  const era = Math.floor(yy / 400);
  const yoe = yy - era * 400;
  const doy = Math.floor((153 * (m > 2 ? m - 3 : m + 9) + 2) / 5);
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

/** The budget period holding `now` (UTC: a day, a week from Monday, a calendar month): its start and end. */
export function budgetPeriod(period: 'day' | 'week' | 'month', now: number): { start: number; end: number } {
  const days = Math.floor(now / DAY_MS);
  if (period === 'day') return { start: days * DAY_MS, end: (days + 1) * DAY_MS };
  if (period === 'week') {
    // 1970-01-01 was a Thursday: Monday-based weekday = (days + 3) mod 7.
    const start = (days - ((((days + 3) % 7) + 7) % 7)) * DAY_MS;
    return { start, end: start + 7 * DAY_MS };
  }
  const { y, m } = civil(days);
  const next = m === 12 ? { y: y + 1, m: 1 } : { y, m: m + 1 };
  return { start: daysFromCivil(y, m) * DAY_MS, end: daysFromCivil(next.y, next.m) * DAY_MS };
}
