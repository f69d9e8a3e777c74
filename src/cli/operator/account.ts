import {
  createAccount,
  deleteAccount,
  getAccount,
  listAccounts,
  setAccount,
} from '../../broker/tools/accounts.js';
import { BrokerError } from '../../contracts/errors.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { withLocalStore } from '../common/local.js';
import { emit, reportError, table } from '../common/output.js';
import { ACCOUNT } from './command-specs.js';

/** A whole-number flag, or a typed error naming it. */
function wholeNumber(flag: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const n = typeof value === 'string' && /^\d{1,7}$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isInteger(n))
    throw new BrokerError(
      'INVALID_INPUT',
      `--${flag} ${JSON.stringify(value)} is not a whole number`,
      'e.g. --weight 2',
    );
  return n;
}

type AccountView = ReturnType<typeof listAccounts>['accounts'][number];

/** A quota flag: a whole number, or the word that clears it (null); absent: unchanged. */
function quotaCount(flag: string, value: unknown, clear: string): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === clear) return null;
  return wholeNumber(flag, value);
}

/** A yes|no flag; absent: unchanged. */
function yesNo(flag: string, value: unknown): boolean | undefined {
  if (value === undefined) return undefined;
  if (value === 'yes' || value === 'no') return value === 'yes';
  throw new BrokerError(
    'INVALID_INPUT',
    `--${flag} ${JSON.stringify(value)} is not yes or no`,
    `e.g. --${flag} yes`,
  );
}

/** The --budget flag: card-hours, or none. */
function budgetHours(value: unknown): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === 'none') return null;
  const n = typeof value === 'string' && /^\d{1,9}(\.\d{1,3})?$/.test(value) ? Number(value) : Number.NaN;
  if (!(n > 0))
    throw new BrokerError(
      'INVALID_INPUT',
      `--budget ${JSON.stringify(value)} is not a number of card-hours`,
      'e.g. --budget 500 --period week',
    );
  return n;
}

const PERIODS = ['day', 'week', 'month'] as const;

/** The quota flags of create and set. */
function quotaFlags(values: Record<string, unknown>) {
  const period = values['period'];
  if (period !== undefined && !(PERIODS as readonly unknown[]).includes(period))
    throw new BrokerError(
      'INVALID_INPUT',
      `--period ${JSON.stringify(period)}`,
      'Use --period day, week or month.',
    );
  const budget = budgetHours(values['budget']);
  const model = values['model'];
  return {
    ...(typeof model === 'string' ? { model } : {}),
    nominal_cards: quotaCount('nominal', values['nominal'], 'none'),
    borrowing_limit: quotaCount('borrow', values['borrow'], 'any'),
    budget_card_hours: budget,
    // Clearing the budget clears its period.
    budget_period: budget === null ? null : (period as (typeof PERIODS)[number] | undefined),
  };
}

/** Nominal, borrowing and budget of one quota in words, e.g. "nominal 4 +2 500 h/week". */
function limitsText(q: AccountView['quotas']): string[] {
  return [
    q.nominal_cards === null ? null : `nominal ${q.nominal_cards}`,
    q.nominal_cards === null ? null : q.borrowing_limit === null ? '+any' : `+${q.borrowing_limit}`,
    q.budget_card_hours === null ? null : `${q.budget_card_hours} h/${q.budget_period}`,
  ].filter((x) => x !== null);
}

function quotaText(a: AccountView): string {
  const own = [
    ...limitsText(a.quotas),
    a.max_priority === null ? null : `priority ≤ ${a.max_priority}`,
    a.preemptible ? 'preemptible' : null,
  ].filter((x) => x !== null);
  // Then each card model's quota (ADR 0048), e.g. "nominal 8 +any; H100: nominal 4 +2".
  const models = a.model_quotas.map((m) => `${m.model}: ${limitsText(m).join(' ')}`);
  return [...(own.length > 0 ? [own.join(' ')] : []), ...models].join('; ');
}

const rows = (list: readonly AccountView[]) =>
  table(
    ['NAME', 'PARENT', 'WEIGHT', 'SHARE', 'QUOTAS', 'PRINCIPALS', 'DESCRIPTION'],
    list.map((a) => [
      a.name,
      a.parent ?? '',
      String(a.weight),
      `${(a.share * 100).toFixed(1)}%`,
      quotaText(a),
      String(a.principals),
      a.description ?? '',
    ]),
  );

/** `gpu-broker account create|list|show|set|delete`: local admin on the master's data dir, as `token`. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(ACCOUNT, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [sub, name] = parsed.positionals;
  if (!ACCOUNT.subcommands?.includes(sub ?? ''))
    return usageError(
      io,
      ACCOUNT,
      sub ? `unknown subcommand "${sub}"` : 'which subcommand: create, list, show, set or delete?',
    );
  try {
    // Checked before the data dir is opened: a bad number changes nothing.
    const weight = wholeNumber('weight', values.weight);
    const quotas = quotaFlags(values);
    const maxPriority = quotaCount('max-priority', values['max-priority'], 'none');
    if (maxPriority !== undefined && maxPriority !== null && maxPriority > 100)
      throw new BrokerError(
        'INVALID_INPUT',
        `--max-priority ${maxPriority} is above 100`,
        'A priority is 0..100.',
      );
    const priority = maxPriority === undefined ? {} : { max_priority: maxPriority };
    const preemptible = yesNo('preemptible', values['preemptible']);
    if (sub !== 'list' && !name)
      throw new BrokerError('INVALID_INPUT', 'which account?', `gpu-broker account ${sub} NAME`);
    return await withLocalStore(values, io, (deps) => {
      const actor = 'local-admin';
      const one = (r: { account: AccountView }) => {
        emit(io, values.json, r, () => rows([r.account]));
        return 0;
      };
      const n = name as string;
      switch (sub) {
        case 'list': {
          const r = listAccounts(deps);
          emit(io, values.json, r, () => rows(r.accounts));
          return 0;
        }
        case 'show':
          return one(getAccount(deps, n));
        case 'create':
          return one(
            createAccount(deps, actor, {
              name: n,
              parent: values.parent,
              weight,
              description: values.description,
              ...quotas,
              ...priority,
              ...(preemptible === undefined ? {} : { preemptible }),
            }),
          );
        case 'set':
          return one(
            setAccount(deps, actor, {
              name: n,
              parent: values.parent,
              weight,
              description: values.description,
              ...quotas,
              ...priority,
              ...(preemptible === undefined ? {} : { preemptible }),
            }),
          );
        default: {
          const r = deleteAccount(deps, actor, n);
          emit(io, values.json, r, () => `deleted account ${n}`);
          return 0;
        }
      }
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
