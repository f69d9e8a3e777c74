import { BrokerError } from '../../contracts/errors.js';
import { parseCardLabel } from '../../contracts/sample.js';
import type { CommandSpec } from '../../platform/args.js';
import { errorMessage } from '../../platform/error-message.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { type MasterClient, withMaster } from '../common/master-client.js';
import { emit, escapeField, reportError } from '../common/output.js';
import { CORDON, DRAIN, RECONCILE, REMOVE_WORKER, UNCORDON, UNDRAIN } from './command-specs.js';

/**
 * `gpu-broker cordon|uncordon WORKER:CARD…`, `drain|undrain|remove-worker WORKER…`,
 * `reconcile TASK… --resolution R --reason T [--force]` for operators. Several targets are all acted on, never
 * only the first: every target is checked against the master before any is changed (a typo changes
 * nothing), then each is changed in turn; if one still fails, the output says which were done.
 */

const SPECS: Record<string, CommandSpec> = {
  cordon: CORDON,
  uncordon: UNCORDON,
  drain: DRAIN,
  undrain: UNDRAIN,
  'remove-worker': REMOVE_WORKER,
  reconcile: RECONCILE,
};

interface Card {
  worker_id: string;
  index: number;
}

/** `WORKER:CARD`, the card an index or a MIG slice label (`gpu-1:0:mig:2/0`); null when it is neither. */
function cardTarget(target: string): { worker: string; index: number } | null {
  const m = /^(.+):(\d{1,3}:mig:\d{1,2}\/\d|\d+)$/.exec(target);
  if (!m) return null;
  const index = /^\d+$/.test(m[2]!) ? Number(m[2]) : parseCardLabel(m[2]!);
  return index === null ? null : { worker: m[1]!, index };
}

export const run: CommandRunner = async (argv, io) => {
  const [verb = '', ...rest] = argv;
  const spec = SPECS[verb];
  if (!spec) throw new Error(`cards.ts has no command "${verb}"`);
  const parsed = parseCommand(spec, rest, io);
  if (typeof parsed === 'number') return parsed;
  const values = parsed.values as {
    reason?: string;
    resolution?: string;
    force?: boolean;
    json?: boolean;
  } & Record<string, unknown>;
  const targets = parsed.positionals;
  const what = verb === 'reconcile' ? 'task' : verb.endsWith('cordon') ? 'card (WORKER:CARD)' : 'worker';
  if (targets.length === 0) return usageError(io, spec, `which ${what}?`);
  const dupes = targets.filter((t, i) => targets.indexOf(t) !== i);
  if (dupes.length > 0) return usageError(io, spec, `${dupes[0]} is named twice`);
  if (verb.endsWith('cordon')) {
    const bad = targets.find((t) => cardTarget(t) === null);
    if (bad)
      return usageError(
        io,
        spec,
        `expected WORKER:CARD (CARD an index or a MIG slice, 0:mig:2/0), got "${bad}"`,
      );
  }
  if (verb === 'reconcile' && (!values.resolution || !values.reason))
    return usageError(io, spec, '--resolution and --reason are required');
  try {
    return await withMaster(values, io, async (c) => {
      await checkTargetsExist(c, verb, targets);
      const done: Array<{ target: string; result: unknown }> = [];
      for (const target of targets) {
        try {
          done.push({ target, result: await act(c, verb, target, values) });
        } catch (err) {
          if (done.length === 0) throw err;
          const names = done.map((d) => d.target).join(', ');
          const message = errorMessage(err);
          throw new BrokerError(
            err instanceof BrokerError ? err.code : 'INTERNAL',
            `${verb} ${target} failed after ${names} succeeded: ${message}`,
            `${targets.slice(done.length).join(' ')} not changed; fix and run ${verb} again for them.`,
          );
        }
      }
      emit(io, values.json, { results: done }, () =>
        done.map((d) => `${verb} ${escapeField(d.target)}: ok`).join('\n'),
      );
      return 0;
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};

/** Fails, naming every unknown target, before anything is changed. */
async function checkTargetsExist(c: MasterClient, verb: string, targets: string[]): Promise<void> {
  let missing: string[] = [];
  if (verb.endsWith('cordon')) {
    const { cards } = await c.get<{ cards: Card[] }>('/api/v1/cards');
    const known = new Set(cards.map((k) => `${k.worker_id}:${k.index}`));
    missing = targets.filter((t) => {
      const card = cardTarget(t);
      return card === null || !known.has(`${card.worker}:${card.index}`);
    });
  } else if (verb !== 'reconcile') {
    const { workers } = await c.get<{ workers: Array<{ worker_id: string }> }>('/api/v1/workers');
    const known = new Set(workers.map((w) => w.worker_id));
    missing = targets.filter((t) => !known.has(t));
  }
  if (missing.length > 0)
    throw new BrokerError(
      'NOT_FOUND',
      `no such ${verb.endsWith('cordon') ? 'card' : 'worker'}: ${missing.join(', ')}; nothing was changed`,
      'gpu-broker status lists workers and cards.',
    );
}

function act(
  c: MasterClient,
  verb: string,
  target: string,
  values: { reason?: string; resolution?: string; force?: boolean },
): Promise<unknown> {
  if (verb === 'cordon' || verb === 'uncordon') {
    const card = cardTarget(target)!;
    return c.post(
      `/api/v1/workers/${encodeURIComponent(card.worker)}/cards/${card.index}/${verb}`,
      values.reason ? { reason: values.reason } : {},
    );
  }
  if (verb === 'reconcile')
    return c.post(`/api/v1/tasks/${encodeURIComponent(target)}/reconcile`, {
      resolution: values.resolution,
      reason: values.reason,
      ...(values.force ? { force: true } : {}),
    });
  const action = verb === 'remove-worker' ? 'remove' : verb;
  return c.post(`/api/v1/workers/${encodeURIComponent(target)}/${action}`, {});
}
