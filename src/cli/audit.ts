import { parseArgs } from 'node:util';
import { BrokerError } from '../contracts/errors.js';
import type { CommandRunner } from './io.js';
import { DATA_DIR_OPTION, withLocalStore } from './local.js';
import { emit, reportError } from './output.js';

/** `gpu-broker audit verify`: walks the hash chain; exits 1 naming the first bad row. */
export const run: CommandRunner = async (argv, io) => {
  const [sub, ...rest] = argv;
  const { values } = parseArgs({ args: rest, options: DATA_DIR_OPTION });
  try {
    if (sub !== 'verify')
      throw new BrokerError('INVALID_INPUT', `unknown subcommand "${sub ?? ''}"`, 'gpu-broker audit verify');
    return await withLocalStore(values, io, ({ store }) => {
      const v = store.audit.verify();
      emit(io, values.json, v, () =>
        v.ok
          ? `audit chain intact: ${v.events} events, head ${v.head}`
          : `audit chain BROKEN at seq ${v.first_bad_seq}: ${v.problem} (${v.events} events read)`,
      );
      return v.ok ? 0 : 1;
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
