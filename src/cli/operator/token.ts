import { createPrincipal, revokePrincipal } from '../../broker/principals.js';
import { BrokerError } from '../../contracts/errors.js';
import { WORKER_ID_RULE, WorkerIdSchema } from '../../contracts/worker-protocol.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { withLocalStore } from '../common/local.js';
import { emit, reportError, table } from '../common/output.js';
import { TOKEN } from './command-specs.js';

/** `gpu-broker token create|list|revoke`: local admin on the master's data dir. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(TOKEN, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [sub, ...positionals] = parsed.positionals;
  if (!TOKEN.subcommands?.includes(sub ?? ''))
    return usageError(
      io,
      TOKEN,
      sub ? `unknown subcommand "${sub}"` : 'which subcommand: create, list or revoke?',
    );
  // Checked before the data dir is opened, so a bad id creates nothing (docs/state-machines.md).
  const workerId = values['worker-id'];
  if (sub === 'create' && workerId !== undefined && !WorkerIdSchema.safeParse(workerId).success) {
    const message = `--worker-id ${JSON.stringify(workerId)}: ${WORKER_ID_RULE}`;
    if (values.json)
      return reportError(io, true, new BrokerError('INVALID_INPUT', message, 'e.g. --worker-id gpu-host-1'));
    return usageError(io, TOKEN, message);
  }
  try {
    return await withLocalStore(values, io, ({ store, clock, ids }) => {
      switch (sub) {
        case 'create': {
          if (!values.name)
            throw new BrokerError(
              'INVALID_INPUT',
              '--name is required',
              'e.g. token create --name alice-agent --role submitter',
            );
          const { principal, token } = createPrincipal(
            { store, clock, ids },
            {
              name: values.name,
              roles: values.role ?? [],
              worker_id: values['worker-id'],
              account: values.account,
            },
          );
          emit(
            io,
            values.json,
            {
              name: principal.name,
              roles: principal.roles,
              worker_id: principal.worker_id,
              account: principal.account,
              token,
            },
            () =>
              `${token}\n(token for ${principal.name} [${principal.roles.join(', ')}] in account ${principal.account}; shown once, store it now)`,
          );
          return 0;
        }
        case 'list': {
          const list = store.principals.list().map((p) => ({
            name: p.name,
            roles: p.roles,
            worker_id: p.worker_id,
            account: p.account,
            created_at: new Date(p.created_at).toISOString(),
            revoked: p.revoked_at !== null,
          }));
          emit(io, values.json, { principals: list }, () =>
            table(
              ['NAME', 'ROLES', 'ACCOUNT', 'WORKER', 'CREATED', 'REVOKED'],
              list.map((p) => [
                p.name,
                p.roles.join(','),
                p.account,
                p.worker_id,
                p.created_at,
                p.revoked ? 'yes' : '',
              ]),
            ),
          );
          return 0;
        }
        case 'revoke': {
          const name = positionals[0] ?? values.name;
          if (!name) throw new BrokerError('INVALID_INPUT', 'which token?', 'gpu-broker token revoke NAME');
          revokePrincipal({ store, clock }, name);
          emit(io, values.json, { name, revoked: true }, () => `revoked ${name}`);
          return 0;
        }
        default:
          throw new BrokerError(
            'INVALID_INPUT',
            `unknown subcommand "${sub ?? ''}"`,
            'gpu-broker token create|list|revoke',
          );
      }
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
