import { parseCommand, usageError } from './args.js';
import { AUDIT } from './command-specs.js';
import type { CommandRunner } from './io.js';
import { withLocalStore } from './local.js';
import { emit, reportError } from './output.js';

/** `gpu-broker audit verify`: walks the hash chain; exits 1 naming the first bad row. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(AUDIT, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [sub, ...extra] = parsed.positionals;
  if (sub !== 'verify') return usageError(io, AUDIT, `unknown subcommand "${sub ?? ''}"`);
  if (extra.length > 0) return usageError(io, AUDIT, `unexpected "${extra[0]}"`);
  try {
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
