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

const rows = (list: readonly AccountView[]) =>
  table(
    ['NAME', 'PARENT', 'WEIGHT', 'SHARE', 'PRINCIPALS', 'DESCRIPTION'],
    list.map((a) => [
      a.name,
      a.parent ?? '',
      String(a.weight),
      `${(a.share * 100).toFixed(1)}%`,
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
            }),
          );
        case 'set':
          return one(
            setAccount(deps, actor, {
              name: n,
              parent: values.parent,
              weight,
              description: values.description,
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
