import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type ChainFileVerification, verifyArchiveFiles, verifyWholeChain } from '../broker/audit-archive.js';
import { BrokerError } from '../contracts/errors.js';
import type { CommandRunner } from './io.js';
import { DATA_DIR_OPTION, withLocalStore } from './local.js';
import { emit, reportError } from './output.js';

/**
 * `gpu-broker audit verify`: walks the whole hash chain — every archive segment recorded in the
 * database, then the live table — and exits 1 naming the first bad row. With `--archive FILE` (repeatable,
 * in chain order) it checks only those files, offline, without opening a database.
 */
export const run: CommandRunner = async (argv, io) => {
  const [sub, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: { ...DATA_DIR_OPTION, archive: { type: 'string', multiple: true } },
  });
  try {
    if (sub !== 'verify')
      throw new BrokerError(
        'INVALID_INPUT',
        `unknown subcommand "${sub ?? ''}"`,
        'gpu-broker audit verify [--archive FILE]…',
      );
    if (values.archive?.length) {
      const v = verifyArchiveFiles(values.archive.map((f) => resolve(f)));
      emit(io, values.json, v, () =>
        v.ok
          ? `archive intact: ${v.events} events, seq ${v.first_seq}..${v.head_seq}, continues from ${v.first_prev_hash}, head ${v.head}`
          : broken(v),
      );
      return v.ok ? 0 : 1;
    }
    return await withLocalStore(values, io, ({ store, dataDir }) => {
      const v = verifyWholeChain(store, dataDir);
      const out = v.ok
        ? {
            ok: true,
            events: v.events,
            head: v.head,
            head_seq: v.head_seq,
            segments: store.audit.segments().length,
          }
        : {
            ok: false,
            events: v.events,
            first_bad_seq: v.first_bad_seq,
            problem: v.problem,
            ...(v.file === 'audit_events' ? {} : { file: v.file }),
          };
      emit(io, values.json, out, () =>
        v.ok ? `audit chain intact: ${v.events} events, head ${v.head}` : broken(v),
      );
      return v.ok ? 0 : 1;
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};

function broken(v: Extract<ChainFileVerification, { ok: false }>): string {
  const where = v.file === 'audit_events' ? '' : ` in ${v.file}`;
  return `audit chain BROKEN at seq ${v.first_bad_seq ?? '?'}${where}: ${v.problem} (${v.events} events read)`;
}
