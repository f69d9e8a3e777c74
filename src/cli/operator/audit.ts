import { resolve } from 'node:path';
import {
  type ChainFileVerification,
  verifyArchiveFiles,
  verifyWholeChain,
} from '../../broker/loops/audit-archive.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { withLocalStore } from '../common/local.js';
import { emit, reportError } from '../common/output.js';
import { AUDIT } from './command-specs.js';

/**
 * `gpu-broker audit verify`: walks the whole hash chain — every archive segment recorded in the
 * database, then the live table — and exits 1 naming the first bad row. With `--archive FILE` (repeatable,
 * in chain order) it checks only those files, offline, without opening a database.
 */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(AUDIT, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [sub, ...extra] = parsed.positionals;
  if (sub !== 'verify') return usageError(io, AUDIT, `unknown subcommand "${sub ?? ''}"`);
  if (extra.length > 0) return usageError(io, AUDIT, `unexpected "${extra[0]}"`);
  try {
    const archive = values.archive as string[] | undefined;
    if (archive?.length) {
      const v = verifyArchiveFiles(archive.map((f) => resolve(f)));
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
