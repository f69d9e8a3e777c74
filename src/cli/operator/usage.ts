import { BrokerError } from '../../contracts/errors.js';
import { parseCommand } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { withMaster } from '../common/master-client.js';
import { emit, escapeField, reportError, table } from '../common/output.js';
import { USAGE } from './command-specs.js';

interface UsageLine {
  key: string;
  simulated: boolean;
  card_seconds: number;
  card_hours: number;
  leases: number;
}
interface Usage {
  by: string;
  since: string;
  until: string;
  account: string | null;
  lines: UsageLine[];
  total_card_seconds: number;
}

const BY = ['account', 'principal', 'model'];

/**
 * A CSV field of text a worker or a principal chose (a card model comes from a worker's sample): its
 * control characters escaped as in every terminal view, a leading `= + - @` (a spreadsheet formula) led
 * by `'`, and quoted when it holds a comma or a quote.
 */
function csvField(raw: string): string {
  const shown = escapeField(raw);
  const safe = /^[=+\-@]/.test(shown) ? `'${shown}` : shown;
  return /[",]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

/** `gpu-broker usage`: the ledger's summary from the master (get_usage). */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(USAGE, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    if (values.by !== undefined && !BY.includes(values.by))
      throw new BrokerError(
        'INVALID_INPUT',
        `--by ${JSON.stringify(values.by)}`,
        'Use --by account, principal or model.',
      );
    const query = new URLSearchParams();
    for (const k of ['by', 'since', 'until'] as const)
      if (values[k] !== undefined) query.set(k, String(values[k]));
    const u = await withMaster(values, io, (c) => c.get<Usage>(`/api/v1/usage?${query}`));
    if (values.csv) {
      io.stdout('key,simulated,card_seconds,card_hours,leases\n');
      for (const l of u.lines)
        io.stdout(`${csvField(l.key)},${l.simulated},${l.card_seconds},${l.card_hours},${l.leases}\n`);
      return 0;
    }
    emit(io, values.json, u, () =>
      [
        `card-hours by ${u.by}, leases ended ${u.since} … ${u.until}${u.account === null ? '' : ` (account ${escapeField(u.account)})`}`,
        table(
          [u.by.toUpperCase(), 'CARDS', 'CARD-HOURS', 'LEASES'],
          u.lines.map((l) => [
            l.key,
            l.simulated ? 'SIMULATED' : 'real',
            l.card_hours.toFixed(3),
            String(l.leases),
          ]),
        ),
        `total ${(u.total_card_seconds / 3600).toFixed(3)} card-hours`,
      ].join('\n'),
    );
    return 0;
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
